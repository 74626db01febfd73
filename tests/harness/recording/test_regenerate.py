"""`harness registry regenerate`: models are cases of the record tier in the runner's isolated,
resumable worker pool, recorded on the device under test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.records import ModelSpec
from harness.recording.regenerate import record_all, regenerate, work_dir
from registry.store import Registry

BERT = ModelSpec("t/bert", "bert", "BertForMaskedLM", downloads=5)
GPT2 = ModelSpec("t/gpt2", "gpt2", "GPT2LMHeadModel", downloads=3)
BROKEN = ModelSpec("t/broken", "bert", "NoSuchModelForAnything")


@pytest.mark.slow
def test_regenerate_on_neuron_resumes_and_reports_failures(tmp_path):
    out = tmp_path / "reg.parquet"
    run = tmp_path / "run"
    first, results, summary = record_all(
        [BERT, BROKEN], run, backend="neuron", workers=2, seq_lengths=(8,), progress=False
    )
    assert summary["ran"] == 2 and {r["model_id"]: r["status"] for r in results} == {
        "t/bert": "pass",
        "t/broken": "error",
    }
    assert {r["model_id"]: r.get("device") for r in results}["t/bert"] == "neuron"
    # a failed model is not re-run on the reference backend: that would record it on the CPU
    assert "reference_cases" not in json.loads((run / "run.json").read_text())["tiers"]["record"]
    assert not (run / "reference").exists()
    # a second call with one model more records only the new one (the journal has the others)
    again, results, summary = record_all(
        [BERT, BROKEN, GPT2], run, backend="neuron", workers=1, seq_lengths=(8,), progress=False
    )
    assert summary["resumed"] == 2 and summary["ran"] == 1
    assert set(again.ops()) >= set(first.ops()) and len(again) > len(first)
    # the op mix is the device's: no CPU-only decomposition (SDPA's flash kernel for the CPU)
    assert not any("_for_cpu" in op for op in again.ops())
    assert any(e.op == "aten.addmm.default" for e in again)

    summary = regenerate([BERT, BROKEN], out, backend="neuron", workers=1, seq_lengths=(8,), progress=False)
    assert summary["recorded_models"] == 1 and [f["model_id"] for f in summary["failed"]] == ["t/broken"]
    assert summary["signatures"] == len(Registry.load(out)) and not work_dir(out).exists()


def test_work_dir_sits_beside_the_output():
    assert work_dir(Path("/x/registry.parquet")) == Path("/x/registry.parquet.run")


def test_default_shape_is_the_model_tiers_sequence_length():
    from harness.build.rules import shrink_rules
    from harness.recording.workloads import SEQ_LENGTHS

    assert (shrink_rules().targets.test_sequence_length,) == SEQ_LENGTHS


def test_a_multimodal_model_records_on_the_device_with_its_image_placeholders():
    """The prompt must carry as many image tokens as the model's own feature method returns; that
    count is asked from the model where the synthetic pixels are (the CPU, as the model tiers do),
    not from the model already on the device (which raised and left the prompt without any)."""
    from dataclasses import asdict

    from harness.recording.workloads import record_spec

    spec = ModelSpec("t/glm_ocr", "glm_ocr", "GlmOcrForConditionalGeneration")
    res = record_spec(asdict(spec), backend="neuron")
    assert res.device == "neuron" and not res.error
    assert [r["mode"] for r in res.runs] == ["real"], res.runs
    assert set(res.runs[0]["phases"]) == {"inference", "forward", "backward", "optimizer"}
    # the vision tower ran on the device: its convolution (patch embedding) is an entry
    assert any(e.op.startswith("aten.convolution") for e in res.entries)


@pytest.mark.ray
@pytest.mark.slow
def test_regenerate_under_ray_records_what_the_local_pool_records(tmp_path):
    """`--executor ray` runs the record tier's cases in Ray's workers: the same op calls as local."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        recorded = {}
        for executor in ("local", "ray"):
            registry, results, summary = record_all(
                [BERT, BROKEN],
                tmp_path / executor,
                backend="neuron",
                workers=2,
                seq_lengths=(8,),
                executor=executor,
                progress=False,
            )
            assert summary["executor"] == executor
            assert {r["model_id"]: r["status"] for r in results} == {"t/bert": "pass", "t/broken": "error"}
            recorded[executor] = {(e.op, e.signature) for e in registry}
        assert recorded["ray"] and recorded["ray"] == recorded["local"]
    finally:
        ray.shutdown()
