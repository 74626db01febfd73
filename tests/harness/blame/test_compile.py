"""Blame of the compile stage: the cpu reference compiles through the device's own pipeline."""

from __future__ import annotations

import pytest

from contracts.backends import get_backend
from contracts.records import ModelSpec, StageResult
from contracts.status import Status
from harness.blame import probe as blame_probe
from harness.blame.compile import compile_reference, judge_compile_pipeline
from harness.blame.probe import check_with_blame

VIEW = "view size is not compatible with input tensor's size and stride (at least one dimension spans ..."


def test_the_compile_reference_follows_the_devices_pipeline():
    cpu, neuron = get_backend("cpu"), get_backend("neuron")
    ref = compile_reference(cpu, neuron)
    assert ref.compile_backend == "aot_eager" == neuron.reference_compile_backend  # AOTAutograd, no inductor
    assert cpu.compile_backend == "inductor"  # the shared adapter is not changed
    assert compile_reference(cpu, cpu) is cpu  # a device that declares nothing: the reference's own


def _rows(ref_compile, forward="pass", backward="pass"):
    ref = {
        "forward": StageResult("forward", forward),
        "backward": StageResult("backward", backward),
        "compile": ref_compile,
    }
    ref_compile.metrics["compile_backend"] = "aot_eager"
    return ref


def test_a_compile_error_the_reference_pipeline_shares_while_eager_passes_is_upstream():
    device = StageResult("compile", Status.ERROR, error_class="RuntimeError", message=VIEW)
    same = StageResult("compile", Status.ERROR, error_class="RuntimeError", message=VIEW)
    blame, ev = judge_compile_pipeline(device, same, _rows(same))
    assert blame == "upstream" and ev["rule"] == "upstream.compile_pipeline"
    assert ev["compile_backend"] == "aot_eager" and ev["eager_on_reference"] == {
        "forward": "pass",
        "backward": "pass",
    }
    assert "view size" in ev["device_error"] and "view size" in ev["reference_error"]
    # otherwise the other rules judge (the row stays the harness' when nothing else pins it)
    other = StageResult("compile", Status.ERROR, error_class="RuntimeError", message="another error")
    assert judge_compile_pipeline(device, other, _rows(other)) is None
    assert judge_compile_pipeline(device, same, _rows(same, backward="error")) is None  # eager fails too
    wrong = StageResult("compile", Status.FAIL, reason="compiled step differs from eager")
    assert judge_compile_pipeline(device, wrong, _rows(wrong)) is None  # a wrong answer is no compile error


def _wrong(tensor):
    return StageResult(
        "compile",
        Status.FAIL,
        reason=f"compiled step differs from eager: {tensor}: max abs error 3",
        metrics={"vs_eager": {"passed": False, "name": tensor}},
    )


def test_a_wrong_tensor_the_reference_pipeline_shares_while_eager_passes_is_upstream():
    grad = "step 1 gradient of model.encoder.proj.bias"
    device, same = _wrong(grad), _wrong(grad)
    blame, ev = judge_compile_pipeline(device, same, _rows(same))
    assert blame == "upstream" and ev["rule"] == "upstream.compile_pipeline" and ev["tensor"] == grad
    other = _wrong("step 1 output logits")  # the reference goes wrong elsewhere: other rules judge
    assert judge_compile_pipeline(device, other, _rows(other)) is None
    assert judge_compile_pipeline(device, same, _rows(same, backward="fail")) is None  # its eager fails too
    passes = StageResult("compile", Status.PASS)
    assert judge_compile_pipeline(device, passes, _rows(passes)) is None  # the reference passes: the device's


@pytest.mark.slow
def test_patchtst_training_step_failing_in_aot_autograd_is_upstream_not_backend(monkeypatch):
    """PatchTSTForClassification's compiled training step raises in AOT autograd on the device; the
    CPU compiled with inductor passes, with aot_eager (the device's pipeline) it raises the same."""
    monkeypatch.setenv("NEURON_COMPILE_COST_SCALE", "0")
    spec = ModelSpec("catalog/patchtst/PatchTSTForClassification", "patchtst", "PatchTSTForClassification")
    result = check_with_blame(spec, "neuron", ["compile"])
    row = result.stages["compile"]
    assert row.status is Status.ERROR and "view size is not compatible" in row.message
    assert row.blame == "upstream", row.blame_evidence
    ev = row.blame_evidence
    assert ev["reference_compile_backend"] == "aot_eager"
    assert ev["reference_evidence"]["rule"] == "upstream.compile_pipeline"


@pytest.mark.slow
def test_the_reference_compile_compares_gradients_as_the_device_compile_does(monkeypatch):
    """The reference's compile stage sees its own eager backward: it compares the training step's
    gradients, as the device's does, not outputs alone in eval mode (which passed where the device
    failed on a gradient, and made every such failure the backend's)."""
    from backend import faults

    monkeypatch.setenv("NEURON_COMPILE_COST_SCALE", "0")
    seen = {}
    real = blame_probe.reference_stages

    def spy(run, failing):
        out = real(run, failing)
        seen.update(out)
        return out

    monkeypatch.setattr(blame_probe, "reference_stages", spy)
    spec = ModelSpec("catalog/bert/BertForMaskedLM", "bert", "BertForMaskedLM")
    with faults.planted(
        name="planted",
        op="aten.native_layer_norm_backward.default",
        kind="perturb",
        rel=0.02,
        output=1,
        scope="compiled",
    ):
        result = check_with_blame(spec, "neuron", ["compile"])
    row = result.stages["compile"]
    assert row.status is Status.FAIL and "gradient of" in row.reason
    assert row.blame == "backend"  # the reference, compiled the same way, passes
    ref = seen["compile"]
    assert ref.status is Status.PASS, ref.reason
    assert ref.metrics["mode"] == "train" and "note" not in ref.metrics["vs_eager"]


# ----------------------------------------------------------- the device's kernels on the compiled graph


def _failed_run(tensor="step 1 gradient of encoder.k.bias", rmse=0.0146, method="rmse"):
    from types import SimpleNamespace

    from contracts.records import ModelCheck

    row = StageResult(
        "compile",
        Status.FAIL,
        reason=f"compiled step differs from eager: {tensor}",
        metrics={"vs_eager": {"passed": False, "name": tensor, "rmse": rmse, "method": method}},
    )
    result = ModelCheck(model_id="m", backend="neuron", stages={"compile": row}, graphs=3)
    adapter = SimpleNamespace(name="neuron", compile_backend="neuron", reference_compile_backend="aot_eager")
    return SimpleNamespace(result=result, adapter=adapter, model=object(), fallback_events=["kept"])


def _stage(status, tensor="", rmse=None, reason="", method="rmse"):
    def run_stage(probe, name):
        assert name == "compile" and probe.adapter.compile_backend == "aot_eager"
        probe.result.graphs = 99  # what the compile stage writes: the probe's own result
        probe.result.stages["compile"] = None
        probe.fallback_events.append("probe's")
        metrics = {"vs_eager": {"name": tensor, "rmse": rmse, "method": method}} if tensor else {}
        return StageResult("compile", status, reason=reason, metrics=metrics)

    return run_stage


def _never(probe, name):
    raise AssertionError("the probe must not run here")


def test_the_device_graph_probe_tells_the_compilers_difference_from_the_graphs():
    from harness.blame.compile import device_graph_evidence

    run = _failed_run()
    # the worst tensor of another step of the same parameter is the same tensor
    same = device_graph_evidence(run, _stage(Status.FAIL, "step 2 gradient of encoder.k.bias", 0.01461))
    assert same["reproduces"] is True and same["status"] == "fail" and "fail the same way" in same["note"]
    # the probe ran on a copy: the run's own result, adapter and fallback events are untouched
    assert run.result.graphs == 3 and run.result.stages["compile"].status == Status.FAIL
    assert run.adapter.compile_backend == "neuron" and run.fallback_events == ["kept"]
    passes = device_graph_evidence(_failed_run(), _stage(Status.PASS))
    assert passes["reproduces"] is False and passes["note"].endswith("the difference is the compiler's own")
    further = device_graph_evidence(
        _failed_run(), _stage(Status.FAIL, "step 1 gradient of encoder.k.bias", 0.02)
    )
    assert further["reproduces"] is False and "a difference of its own" in further["note"]
    elsewhere = device_graph_evidence(_failed_run(), _stage(Status.FAIL, "step 1 output logits", 0.0146))
    assert elsewhere["reproduces"] is False and elsewhere["tensor"] == "output logits"
    # judged another way (a non-finite value where the device was merely off) is no reproduction
    nonfinite = device_graph_evidence(
        _failed_run(), _stage(Status.FAIL, "step 1 gradient of encoder.k.bias", 0.0146, method="nonfinite")
    )
    assert nonfinite["reproduces"] is False and "nonfinite" in nonfinite["note"]
    broken = device_graph_evidence(_failed_run(), _stage(Status.ERROR, reason="InternalTorchDynamoError: x"))
    assert broken["reproduces"] is False and "could not be compared (error" in broken["note"]


def test_the_device_graph_probe_runs_only_where_it_can_tell_something():
    from harness.blame.compile import device_graph_evidence

    error = _failed_run()
    error.result.stages["compile"] = StageResult(
        "compile", Status.ERROR, error_class="RuntimeError", message="x"
    )
    assert device_graph_evidence(error, _never) is None  # an exception is no comparison
    own = _failed_run()
    own.adapter.compile_backend = (
        "aot_eager"  # a backend that compiles with that pipeline: nothing to tell apart
    )
    assert device_graph_evidence(own, _never) is None
    undeclared = _failed_run()
    undeclared.adapter.reference_compile_backend = None  # a backend that declares no such pipeline
    assert device_graph_evidence(undeclared, _never) is None
    no_model = _failed_run()
    no_model.model = None
    assert device_graph_evidence(no_model, _never) is None
    slow = _failed_run()
    slow.result.stages["compile"].seconds = 10_000.0  # a second compile as slow would outlast the probe
    assert device_graph_evidence(slow, _never) is None


def test_a_device_graph_probe_that_cannot_be_set_up_leaves_the_verdict_alone(monkeypatch):
    """An adapter whose compile backend cannot be replaced (a read-only property): no evidence, and
    judge_run keeps the reference's `backend` verdict instead of failing the judgement."""
    from harness.blame.compile import device_graph_evidence

    class Fixed:
        name, reference_compile_backend = "fixed", "aot_eager"

        @property
        def compile_backend(self):
            return "fixed-compiler"

    run = _failed_run()
    run.adapter = Fixed()
    assert device_graph_evidence(run, _never) is None
    run.spec, run.cpu_model = None, None
    ref = {"compile": StageResult("compile", Status.PASS, metrics={"compile_backend": "aot_eager"})}
    monkeypatch.setattr(blame_probe, "reference_stages", lambda r, failing: ref)
    blame_probe.judge_run(run, ["compile"])
    row = run.result.stages["compile"]
    assert row.blame == "backend" and "device_graph" not in row.blame_evidence


@pytest.mark.slow
def test_a_fault_planted_in_the_compiler_is_the_compilers_own_difference():
    """End to end: a 1% error planted in the compiler's softmax fails BERT's compile stage, blamed on
    the backend; the device's eager kernels on the same graph pass, and the row says so."""
    from backend import faults

    faults.clear()
    with faults.planted(
        name="compiled-softmax", op="aten._safe_softmax.default", kind="perturb", rel=0.01, scope="compiled"
    ):
        result = check_with_blame(
            ModelSpec("catalog/bert/BertForMaskedLM", "bert", "BertForMaskedLM"), stages=["compile"]
        )
    row = result.stages["compile"]
    assert row.status == Status.FAIL and row.blame == "backend", row.reason
    graph = row.blame_evidence["device_graph"]
    assert (
        graph["compile_backend"] == "aot_eager" and graph["status"] == "pass" and graph["reproduces"] is False
    )
    assert row.blame_evidence["why"].endswith("the difference is the compiler's own")
    faults.clear()
