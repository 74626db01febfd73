"""Fallback location: every fallback event names the model line (its modeling file) beside the caller
frame, fallbacks.parquet keeps it, and the report ranks fallback ops with the model lines."""

from __future__ import annotations

import linecache

import pytest
import yaml

from contracts.backends import get_backend
from contracts.records import Case, ModelSpec
from harness.stages.check import check_model

LLAMA = ModelSpec("catalog/llama/LlamaForCausalLM", "llama", "LlamaForCausalLM", downloads=7)


@pytest.fixture
def without_rsqrt(tmp_path, monkeypatch):
    get_backend("neuron")
    from backend import lowering

    table = lowering.load_table().to_dict()  # the bundled table, in its file format
    del table["ops"]["aten.rsqrt"]  # LlamaRMSNorm: hidden_states * torch.rsqrt(variance + eps)
    path = tmp_path / "reduced.yaml"
    path.write_text(yaml.safe_dump(table))
    monkeypatch.setenv(lowering.ENV_VAR, str(path))
    lowering.set_table(None)
    yield
    monkeypatch.delenv(lowering.ENV_VAR)
    lowering.set_table(None)


def _source_line(model_frame: str) -> str:
    import transformers

    rel, line = model_frame.rsplit(":", 1)
    root = transformers.__file__.rsplit("/transformers/", 1)[0]
    return linecache.getline(f"{root}/{rel}", int(line))


def test_a_fallback_event_points_into_the_modeling_file(without_rsqrt, tmp_path):
    result = check_model(LLAMA, backend="neuron", stages=["forward"])
    events = [e for e in result.fallback_events if e["op"] == "aten.rsqrt.default"]
    assert events, result.fallback_events
    for e in events:
        assert e["model_frame"].startswith("transformers/models/llama/modeling_llama.py:"), e
        assert "rsqrt" in _source_line(e["model_frame"])
        assert (
            "modeling_llama" not in e["frame"]
        )  # the caller frame stays the harness line that ran the model

    # through the runner's rows into fallbacks.parquet and the report's ranking
    from contracts.rows import case_rows
    from contracts.tiers import from_result
    from harness.engine.rerun import blamed
    from reports.coverage import summarize_run
    from reports.tables import read_table, write_run_tables

    case = Case.for_spec(LLAMA, "representative")
    record = {"outcome": from_result(case, result, ["forward"]).to_dict()}
    meta = {
        "run_id": "r1",
        "backend": "neuron",
        "started_at": "2026-01-01T00:00:00+00:00",
        "tiers": ["representative"],
    }
    rows = case_rows(blamed(record, "neuron", {}), "r1")
    write_run_tables(tmp_path, meta, rows.rows, rows.fallback_events)
    table = read_table(tmp_path, "fallbacks")
    frames = table.loc[table["op"] == "aten.rsqrt.default", "model_frame"].tolist()
    assert frames and all(f.startswith("transformers/models/llama/modeling_llama.py:") for f in frames)
    top = {o["op"]: o for o in summarize_run(tmp_path).top_fallback_ops}
    lines = top["aten.rsqrt.default"]["model_lines"]
    assert lines and lines[0]["model_frame"] in frames and lines[0]["cases"] == 1
