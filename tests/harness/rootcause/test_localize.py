"""Localization on a real (tiny) model with planted faults of each kind: the planted op, the right
phase and route, where it ran, and a repro that fails faulted and passes clean; a clean device has
no root cause; a time limit is said; localization never changes a row's verdict.

Faults are planted through NEURON_FAULTS (and loaded in this process): the repro's verification
runs the standalone test in fresh processes, which plant them the same way."""

from __future__ import annotations

import time

import pytest
import yaml

from contracts.records import ModelSpec
from contracts.rootcause import RootCause
from contracts.status import Status
from harness.rootcause.localize import check_with_root_cause, localize_stage
from harness.stages.check import check_model

BERT = ModelSpec("catalog/bert", "bert", "BertForMaskedLM")
EAGER = ["load", "forward", "backward", "numerics"]

pytestmark = pytest.mark.slow


@pytest.fixture
def plant(tmp_path, monkeypatch):
    """plant(**fault): the fault in this process and in every process it starts (NEURON_FAULTS)."""
    from backend import faults

    def plant(**fault):
        path = tmp_path / "faults.yaml"
        path.write_text(yaml.safe_dump({"version": 1, "faults": [{"name": "planted", **fault}]}))
        monkeypatch.setenv("NEURON_FAULTS", str(path))
        faults.load(path)

    yield plant
    faults.clear()


def _rc(result, stage: str) -> RootCause:
    row = result.stages[stage]
    assert row.root_cause, f"{stage} {row.status.value} {row.blame}: no root cause"
    return RootCause.from_dict(row.root_cause)


def _only(result, stage: str) -> None:
    """Only `stage` carries a root cause: passing rows and rows not blamed on the backend never do."""
    assert [s for s, r in result.stages.items() if r.root_cause] == [stage]


def test_a_forward_numerics_fault_is_localized_with_a_verified_repro(plant):
    plant(op="aten.gelu.default", kind="perturb", rel=0.01)
    result = check_with_root_cause(BERT, "neuron", EAGER)
    row = result.stages["numerics"]
    assert row.status is Status.FAIL and row.blame == "backend"  # the verdict is blame's, kept
    rc = _rc(result, "numerics")
    _only(result, "numerics")
    assert (rc.found, rc.op, rc.phase, rc.kind, rc.route) == (
        True,
        "aten.gelu.default",
        "forward",
        "mismatch",
        "eager_shadow",
    )
    assert rc.module_path.startswith("bert.encoder.layer.0.intermediate")
    assert rc.source_line.startswith("modeling_bert.py:") and rc.call_index > 0
    assert rc.input_dtypes == ["float32"] and len(rc.input_shapes[0]) == 3
    assert rc.mismatch.max_rel == pytest.approx(0.01, rel=0.05) and rc.mismatch.tolerance_class == "float32"
    assert rc.repro is not None and rc.repro.verified is True, rc.repro
    assert "passes on cpu" in rc.repro.why and rc.repro.case["op"] == "aten.gelu.default"
    assert rc.to_dict()["repro_verified"] is True and rc.seconds > 0


def test_a_backward_only_fault_is_found_in_the_backward(plant):
    plant(op="aten.gelu_backward.default", kind="perturb", rel=0.02)
    result = check_with_root_cause(BERT, "neuron", EAGER)
    assert result.stages["forward"].status is Status.PASS  # eager forward is right
    rc = _rc(result, "numerics")
    assert (rc.op, rc.phase, rc.route) == ("aten.gelu_backward.default", "backward", "eager_shadow")
    assert "transform_act_fn" in rc.module_path or "intermediate" in rc.module_path  # a GELU module
    assert rc.repro.verified is True, rc.repro


def test_a_compiled_only_fault_is_found_in_the_compiled_graph_and_its_repro_compiles(plant):
    plant(op="aten.native_layer_norm_backward.default", kind="perturb", rel=0.02, output=1, scope="compiled")
    result = check_with_root_cause(BERT, "neuron", ["load", "forward", "backward", "compile"])
    assert result.stages["backward"].status is Status.PASS and result.stages["compile"].blame == "backend"
    rc = _rc(result, "compile")
    assert (rc.op, rc.phase, rc.route) == (
        "aten.native_layer_norm_backward.default",
        "compiled",
        "compiled_shadow",
    )
    assert rc.mismatch.output == "1" and rc.source_line.startswith("modeling_bert.py:")
    assert '"run":"compiled"' in rc.repro.case["signature"]  # the repro runs through the compiler
    assert rc.repro.verified is True, rc.repro


def test_an_error_is_localized_to_the_raising_call(plant):
    plant(op="aten.addmm.default", kind="raise")
    result = check_with_root_cause(BERT, "neuron", EAGER)
    assert result.stages["forward"].status is Status.ERROR
    rc = _rc(result, "forward")
    _only(result, "forward")  # backward/numerics are not attempted: nothing of their own to localize
    assert (rc.op, rc.kind, rc.phase) == ("aten.addmm.default", "error", "forward")
    assert rc.error_class == "NeuronFaultError" and rc.module_path.endswith("query")
    assert rc.repro.verified is True and "NeuronFaultError" in rc.repro.why


def test_a_clean_device_has_no_root_cause_and_its_steps_shadow_clean():
    box = {}
    result = check_model(
        BERT,
        "neuron",
        ["load", "forward", "backward", "compile", "numerics"],
        judge=lambda r, w: box.setdefault("run", r),
    )
    assert all(r.status is Status.PASS for r in result.stages.values())
    run = box["run"]
    for stage in ("numerics", "compile"):  # forced here: every call of the eager and compiled steps judged
        rc = localize_stage(run, stage, 120.0)
        assert not rc.found and rc.why.startswith("no call differs"), rc
        assert "calls judged" in rc.why and not rc.gave_up


def test_a_row_that_hits_the_time_limit_says_so(plant, monkeypatch):
    plant(op="aten.gelu.default", kind="perturb", rel=0.01)
    monkeypatch.setenv("HARNESS_ROOT_CAUSE_SECONDS", "0.001")
    result = check_with_root_cause(BERT, "neuron", EAGER)
    row = result.stages["numerics"]
    assert row.status is Status.FAIL and row.blame == "backend"
    rc = _rc(result, "numerics")
    assert not rc.found and rc.gave_up.startswith("time limit")


def test_localization_that_raises_is_recorded_and_changes_no_verdict(plant, monkeypatch):
    import harness.rootcause.localize as localize

    def broken(*args, **kwargs):
        raise RuntimeError("shadow broke")

    monkeypatch.setattr(localize, "_localize", broken)
    plant(op="aten.gelu.default", kind="perturb", rel=0.01)
    result = check_with_root_cause(BERT, "neuron", EAGER)
    assert result.stages["numerics"].status is Status.FAIL and result.stages["numerics"].blame == "backend"
    rc = _rc(result, "numerics")
    assert not rc.found and rc.why == "localization raised RuntimeError: shadow broke"


def test_a_compiler_that_fuses_the_wrong_result_is_found_by_the_accuracy_minifier():
    """A dynamo backend whose compiled GELU is 1% off, with no op-by-op call to shadow the error in
    (the compiled graph's own calls are computed as issued): the captured AOT graphs, minimized by
    PyTorch's minifier against the reference, name the GELU."""
    import torch
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    from harness.rootcause import minify

    def scaled_gelu(gm, example_inputs):
        for n in list(gm.graph.nodes):
            if n.target is torch.ops.aten.gelu.default:
                with gm.graph.inserting_after(n):
                    m = gm.graph.call_function(torch.ops.aten.mul.Tensor, (n, 1.01))
                n.replace_all_uses_with(m, delete_user_cb=lambda u, m=m: u is not m)
        gm.recompile()
        return gm

    name = "rootcause_test_scaled_gelu"
    if name not in _COMPILER_FNS:
        register_backend(aot_autograd(fw_compiler=scaled_gelu, bw_compiler=scaled_gelu), name=name)
    box = {}
    check_model(BERT, "neuron", ["load", "forward", "backward"], judge=lambda r, w: box.setdefault("run", r))
    run = box["run"]

    class Adapter:
        compile_backend = name

        def __getattr__(self, key):
            return getattr(run.adapter_, key)

    run.adapter_, run.adapter = run.adapter, Adapter()
    rc, finding = minify.localize_compiled(run, True, time.monotonic() + 300)
    assert rc.found and finding is not None, rc
    assert (rc.op, rc.phase, rc.route) == ("aten.gelu.default", "compiled", "accuracy_minifier")
    assert rc.extra["fails_alone"] is True and "aten.gelu.default" in rc.extra["minimal_graph"]
    assert rc.module_path.endswith("intermediate_act_fn") and rc.mismatch.max_rel == pytest.approx(
        0.01, rel=0.05
    )
