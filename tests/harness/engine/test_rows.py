"""What the runner hands to reports: one row per case and stage, with fallbacks and weights."""

from __future__ import annotations

import pandas as pd

from contracts.records import Case, CaseOutcome, ModelCheck, StageResult
from contracts.rows import case_rows
from contracts.status import MODEL_STAGES, Status
from contracts.tiers import failure_outcome, from_result
from harness.engine.journal import Journal
from harness.engine.rerun import blamed
from harness.engine.runner import write_tables
from reports.coverage import tier_summary


def _check() -> ModelCheck:
    stages = {s: StageResult(s, Status.PASS, seconds=0.5) for s in MODEL_STAGES}
    stages["on_device"] = StageResult("on_device", Status.FAIL, reason="cpu_fallback")
    stages["numerics"] = StageResult("numerics", Status.NOT_ATTEMPTED, reason="no reference")
    events = [
        {
            "op": "aten::nonzero",
            "input_shapes": [[4]],
            "input_dtypes": ["float32"],
            "reason": "data-dependent-shape",
            "count": 3,
            "frame": "model.py:12",
        }
    ]
    return ModelCheck(
        model_id="org/a",
        backend="neuron",
        stages=stages,
        model_type="bert",
        architecture="BertForMaskedLM",
        fallback_count=3,
        fallback_ops=["aten::nonzero"],
        fallback_events=events,
        peak_memory_bytes=1234,
        graphs=2,
    )


def test_model_check_becomes_one_row_per_stage_with_totals_once(tmp_path):
    case = Case("bert/abc", "full", model_ids=["org/a", "org/b"], weight=30.0)
    out = from_result(case, _check(), MODEL_STAGES)
    assert out.status == "not_attempted"  # the first stage that is neither pass nor skipped
    case_out = case_rows(CaseOutcome.from_dict(out.to_dict()), "r1")  # through the journal's JSON
    rows = case_out.rows
    assert [r.stage for r in rows] == list(MODEL_STAGES)
    assert all(r.model_ids == ["org/a", "org/b"] and r.weight == 30.0 and r.n_models == 2 for r in rows)
    assert sum(r.fallback_count or 0 for r in rows) == 3  # counted once, on on_device
    assert [r.stage for r in rows if r.fallback_count] == ["on_device"]
    assert [(e["case_id"], e["model_id"], e["op"]) for e in case_out.fallback_events] == [
        ("bert/abc", "org/a", "aten::nonzero")
    ]
    with Journal(tmp_path) as j:
        j.append({"tier": "full", "case_id": case.case_id, "outcome": out.to_dict()})
        paths = write_tables(
            tmp_path,
            j,
            {"run_id": "r1", "backend": "neuron", "started_at": "2026-11-29T00:00:00+00:00", "tiers": {}},
        )
    df = pd.read_parquet(paths["results"])
    assert len(df) == len(MODEL_STAGES) and set(df.status) == {"pass", "fail", "not_attempted"}
    assert df[df.stage == "on_device"].fallback_ops.iloc[0].tolist() == ["aten::nonzero"]
    falls = pd.read_parquet(paths["fallbacks"])
    assert falls.op.tolist() == ["aten::nonzero"] and falls.case_id.tolist() == ["bert/abc"]


def test_summary_counts_models_and_downloads():
    a = from_result(
        Case("x", "full", model_ids=["m1", "m2"], weight=90.0),
        [StageResult("load", "pass"), StageResult("forward", "pass")],
        (),
    )
    b = failure_outcome(
        Case("y", "full", model_ids=["m3"], weight=10.0),
        ("load", "forward"),
        "crash",
        "worker_crash:SIGSEGV",
        "SIGSEGV",
    )
    # as the runner writes them: each journal record blamed (no backend, no reference re-run), then its rows
    rows = [r for o in (a, b) for r in case_rows(blamed({"outcome": o.to_dict()}, None, {}), "r1").rows]
    s = tier_summary(pd.DataFrame([r.__dict__ for r in rows]), "full")
    assert s["counts"] == {"crash": 1, "pass": 1} and s["models"] == 3
    load = s["coverage"]["load"]
    assert {
        k: load[k] for k in ("models_pass", "models_total", "weight_pass", "weight_total", "weighted_share")
    } == {
        "models_pass": 2,
        "models_total": 3,
        "weight_pass": 90.0,
        "weight_total": 100.0,
        "weighted_share": 0.9,
    }
    # the crash on the reference backend (no backend given) is the harness' own: split out, with denominators
    assert load["models_by_blame"] == {"harness": 1} and s["by_stage_blame"]["load"] == {"harness": 1}
    assert load["models_attributable"] == 3 and load["attributable_share"] == 2 / 3
    assert CaseOutcome.from_dict(b.to_dict()).status == "crash"
