"""The shadow on small modules: the first call that differs on its own inputs, forward and backward,
the raising call, where it ran; clean calls, views, random ops and ties are not blamed."""

from __future__ import annotations

import contextlib
import time

import pytest
import torch

from harness.rootcause import calls
from harness.rootcause.shadow import ShadowMode, Stop
from harness.stages.reference import DeviceRounding, dispatch_key


@pytest.fixture(scope="module")
def adapter():
    from contracts.backends import get_backend

    return get_backend("neuron")


@pytest.fixture
def planted():
    from backend import faults

    yield faults.planted
    faults.clear()


def _mode(adapter, seconds: float = 60.0, **kw) -> ShadowMode:
    rounded = adapter.rounded_inputs()
    rounding = DeviceRounding(rounded, dispatch_key(adapter.device_type)) if rounded else None
    return ShadowMode(adapter.device_type, rounding, False, time.monotonic() + seconds, **kw)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 32)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(32, 4)
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(self.down(self.act(self.up(x))))


def _step(model, x, mode: ShadowMode, backward: bool = True) -> None:
    with contextlib.suppress(Stop):
        mode.phase = "forward"
        with mode.watching(model), mode:
            out = model(x)
        if backward:
            mode.phase = "backward"
            with mode:
                out.pow(2).mean().backward()


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return MLP().to("neuron"), torch.randn(6, 8).to("neuron")


def test_a_clean_device_has_no_root_cause_forward_or_backward(adapter, mlp):
    """The device in its default bf16 mode rounds the matmuls' inputs; the reference rounds as
    declared, so no call is blamed for the device's documented precision."""
    model, x = mlp
    mode = _mode(adapter)
    _step(model, x, mode)
    assert mode.found is None and not mode.gave_up
    assert mode.counts["forward"] > 0 and mode.counts["backward"] > 0
    assert mode.judged > 5 and mode.passed_by["view"] > 0  # views are passed by, not judged


def test_the_first_call_that_differs_on_its_own_inputs_is_named_not_the_calls_after_it(adapter, mlp, planted):
    model, x = mlp
    mode = _mode(adapter)
    with planted(op="aten.gelu.default", kind="perturb", rel=0.01):
        _step(model, x, mode)
    f = mode.found
    assert f is not None and f.op == "aten.gelu.default" and f.kind == "mismatch" and f.phase == "forward"
    assert f.module_path == "act"  # the module whose forward made the call
    assert f.source_line.startswith("test_shadow.py:") and "in forward" in f.source_line
    assert f.mismatch.tolerance_class == "float32" and f.mismatch.max_rel == pytest.approx(0.01, rel=0.05)
    assert f.facts[0] == [[6, 32]] and f.facts[1] == ["float32"]
    # the call was judged on the device's own inputs: its CPU copies are the repro's inputs
    assert f.args[0].device.type == "cpu" and f.args[0].shape == (6, 32)


def test_a_backward_only_fault_is_found_in_the_backward_where_its_forward_ran(adapter, mlp, planted):
    model, x = mlp
    mode = _mode(adapter)
    with planted(op="aten.gelu_backward.default", kind="perturb", rel=0.02):
        _step(model, x, mode)
    f = mode.found
    assert f is not None and f.op == "aten.gelu_backward.default" and f.phase == "backward"
    assert f.module_path == "act"  # the forward call that made the autograd node ran there
    assert "in forward" in f.source_line


def test_the_call_that_raises_on_the_device_is_the_root_cause_of_an_error(adapter, mlp, planted):
    model, x = mlp
    mode = _mode(adapter)
    with planted(op="aten.native_layer_norm.default", kind="raise"), pytest.raises(RuntimeError):
        _step(model, x, mode)
    f = mode.found
    assert f is not None and f.op == "aten.native_layer_norm.default" and f.kind == "error"
    assert f.error_class and "native_layer_norm" in f.message and f.module_path == "norm"


def test_a_nan_is_a_mismatch_and_random_calls_are_never_blamed(adapter, planted):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.ReLU()).to("neuron")
    model.train()
    x = torch.randn(3, 4).to("neuron")
    clean = _mode(adapter)
    _step(model, x, clean)
    assert clean.found is None and clean.passed_by["random"] >= 1  # dropout's mask differs by design
    mode = _mode(adapter)
    with planted(op="aten.threshold_backward.default", kind="nan"):
        _step(model, x, mode)
    assert mode.found is not None and mode.found.op == "aten.threshold_backward.default"
    assert mode.found.evidence["method"] == "nonfinite"


def test_past_the_deadline_the_step_is_stopped_and_says_so(adapter, mlp, planted):
    model, x = mlp
    mode = _mode(adapter, seconds=-1.0)
    with planted(op="aten.gelu.default", kind="perturb", rel=0.01):
        _step(model, x, mode)
    assert mode.found is None and mode.gave_up.startswith("time limit")


def test_an_index_output_that_picks_another_of_equal_values_is_a_tie_not_a_mismatch():
    values = torch.tensor([2.0, 2.0, 1.0])
    ref = calls.ReferenceCall(eager=[("0", values), ("1", torch.tensor([0, 1, 2]))], truth=None)
    tie = [("0", values.clone()), ("1", torch.tensor([1, 0, 2]))]
    assert calls.judge(tie, ref, False) is None
    wrong = [("0", values + 1), ("1", torch.tensor([1, 0, 2]))]
    mismatch, evidence = calls.judge(wrong, ref, False)
    assert mismatch.output == "0" and evidence["method"] in ("allclose", "rmse")
    only_ints = calls.ReferenceCall(eager=[("0", torch.tensor([3]))], truth=None)
    mismatch, evidence = calls.judge([("0", torch.tensor([4]))], only_ints, False)
    assert mismatch.tolerance_class == "exact" and mismatch.max_abs == 1.0


def test_the_gate_judges_the_device_by_the_float64_truth_with_float32_as_the_yardstick():
    """An output as far from the fp64 truth as float32 itself is passes; a 1% error does not."""
    torch.manual_seed(0)
    a, b = torch.randn(64, 512), torch.randn(512, 64)
    ref = calls.recompute(torch.ops.aten.mm.default, (a, b), {}, None)
    assert ref.truth is not None and ref.truth[0][1].dtype == torch.float64
    device = torch.ops.aten.mm.default(a.t().contiguous().t(), b)  # another summation order
    assert calls.judge([("0", device)], ref, False) is None
    assert calls.judge([("0", device * 1.01)], ref, False) is not None


def test_views_random_and_uninitialized_outputs_have_nothing_to_compare():
    aten = torch.ops.aten
    assert calls.skip_reason(aten.view.default) == "view"
    assert calls.skip_reason(aten.t.default) == "view"
    assert calls.skip_reason(aten.bernoulli.default) == "random"
    assert calls.skip_reason(aten.empty_like.default) in ("uninitialized", "random")
    assert calls.skip_reason(aten.add_.Tensor) == ""  # in place: judged by what it wrote
    assert calls.skip_reason(aten.mm.default) == ""
