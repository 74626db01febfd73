"""CPU fallbacks are recorded with op, signature, reason, user frame and count; modes warn/error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import yaml

import backend
from backend import lowering
from backend.errors import NeuronFallbackWarning
from backend.fallback import FallbackEvent, record_fallback

ROOT = Path(__file__).resolve().parents[2]
HERE = str(Path(__file__).resolve())


@pytest.fixture
def table_without(tmp_path):
    """Install the default table minus some ops; restore the default afterwards."""

    def install(*ops: str):
        data = lowering.current_table().to_dict()
        for op in ops:
            data["ops"].pop(op)
        path = tmp_path / "table.yaml"
        path.write_text(yaml.safe_dump(data))
        return lowering.set_table(path)

    yield install
    lowering.set_table(None)


@pytest.fixture
def mode():
    previous = backend.fallback_mode()
    yield backend.set_fallback_mode
    backend.set_fallback_mode(previous)


def _line() -> int:
    return sys._getframe(1).f_lineno + 1


def test_op_removed_from_table_falls_back_with_reason_and_frame(table_without):
    table_without("aten.tanh")
    x = torch.randn(2, 3, device="neuron")
    with backend.collect_fallbacks() as events:
        line = _line()
        y = torch.tanh(x)
        torch.tanh(x)  # second call: same kind of event, counted
    torch.testing.assert_close(y.cpu(), torch.tanh(x.cpu()))  # the fallback computed it right
    assert len(events) == 2  # two call sites -> two frames
    first = events[0]
    assert isinstance(first, FallbackEvent)
    assert first.op == "aten.tanh.default"
    assert first.reason == "no-lowering"
    assert first.input_shapes == [[2, 3]] and first.input_dtypes == ["float32"]
    assert first.frame == f"{HERE}:{line}"
    assert first.count == 1 and events[1].frame == f"{HERE}:{line + 1}"


def test_repeated_calls_at_one_frame_aggregate_into_a_count(table_without):
    table_without("aten.tanh")
    x = torch.randn(4, device="neuron")
    with backend.collect_fallbacks() as events:
        for _ in range(3):
            torch.tanh(x)
    assert [(e.op, e.count) for e in events] == [("aten.tanh.default", 3)]


def test_dtype_and_data_dependent_reasons():
    doubles = torch.ones(3, dtype=torch.float64).to("neuron")  # transfers work for any dtype
    values = torch.tensor([0.0, 1.0, 2.0], device="neuron")
    backend.clear_op_tracking()
    with backend.collect_fallbacks() as events:
        doubles.exp()
        torch.nonzero(values)
    reasons = {e.op: e.reason for e in events}
    assert reasons == {"aten.exp.default": "dtype", "aten.nonzero.default": "data-dependent-shape"}
    assert backend.fallback_ops() == {"aten.exp.default": 1, "aten.nonzero.default": 1}
    executed = backend.executed_ops()
    assert executed["aten.exp.default"] == 1 and executed["aten.nonzero.default"] == 1
    backend.clear_op_tracking()
    assert backend.fallback_ops() == {} and backend.executed_ops() == {}


def test_native_ops_are_executed_but_not_fallbacks():
    backend.clear_op_tracking()
    x = torch.randn(3, 3, device="neuron")
    with backend.collect_fallbacks() as events:
        (x @ x).relu().sum()
    assert events == []
    assert {"aten.mm.default", "aten.relu.default", "aten.sum.dim_IntList"} <= set(backend.executed_ops())


def test_collectors_nest_and_only_see_their_block():
    x = torch.tensor([1.0, 0.0], device="neuron")
    with backend.collect_fallbacks() as outer:
        torch.nonzero(x)
        with backend.collect_fallbacks() as inner:
            x.masked_select(x > 0)
        torch.nonzero(x)
    assert [e.op for e in inner] == ["aten.masked_select.default"]
    assert sorted(e.op for e in outer) == [
        "aten.masked_select.default",
        "aten.nonzero.default",
        "aten.nonzero.default",
    ]


@pytest.mark.parametrize("thread", ["caller", "device"])
def test_backward_fallback_frame_points_at_the_backward_call(table_without, thread):
    """On the calling thread (the default, backend.autograd_thread) and on the engine's device
    thread the frame is the same: the line that called backward(), marked as backward."""
    from backend import autograd_thread

    table_without("aten.tanh_backward")
    x = torch.randn(3, device="neuron", requires_grad=True)
    y = torch.tanh(x).sum()
    previous = torch._C._is_multithreading_enabled()
    autograd_thread.apply(thread)
    try:
        with backend.collect_fallbacks() as events:
            line = _line()
            y.backward()
    finally:
        torch.autograd.set_multithreading_enabled(previous)
    (event,) = events
    assert event.op == "aten.tanh_backward.default" and event.reason == "no-lowering"
    assert event.frame == f"{HERE}:{line} (backward)"


def test_warn_mode_warns_once_per_op(mode):
    mode("warn")
    backend.clear_op_tracking()
    x = torch.tensor([1.0, 0.0], device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.nonzero(x)
        torch.nonzero(x)
    ours = [w for w in caught if issubclass(w.category, NeuronFallbackWarning)]
    assert len(ours) == 1
    assert "aten.nonzero.default" in str(ours[0].message) and "data-dependent-shape" in str(ours[0].message)
    assert backend.fallback_ops() == {"aten.nonzero.default": 2}  # still recorded


def test_error_mode_raises_naming_op_and_reason(mode):
    x = torch.ones(2, dtype=torch.float64).to("neuron")
    mode("error")
    with pytest.raises(backend.NeuronFallbackError) as info:
        x.exp()
    assert info.value.op == "aten.exp.default" and info.value.reason == "dtype"
    assert "aten.exp.default" in str(info.value) and "dtype" in str(info.value)
    (torch.ones(2, device="neuron") * 3).sum().item()  # native ops still run in error mode


def test_bad_mode_is_rejected(mode):
    with pytest.raises(ValueError, match="record"):
        backend.set_fallback_mode("loud")


def test_record_fallback_api_used_by_the_compiled_path(mode):
    fake = torch.empty(4, 8, device="meta")
    with backend.collect_fallbacks() as events:
        line = _line()
        event = record_fallback("aten.nonzero.default", (fake,), {}, "data-dependent-shape")
    assert events == [event]
    assert event.input_shapes == [[4, 8]] and event.input_dtypes == ["float32"]
    assert event.frame == f"{HERE}:{line}"
    mode("error")
    with pytest.raises(backend.NeuronFallbackError):
        record_fallback("aten.nonzero.default", (fake,), None, "data-dependent-shape")


def test_env_var_selects_error_mode_in_a_new_process():
    code = textwrap.dedent(
        """
        import json, torch, backend
        try:
            torch.nonzero(torch.ones(2, device="neuron"))
            outcome = "ran"
        except backend.NeuronFallbackError as exc:
            outcome = [exc.op, exc.reason]
        print(json.dumps({"mode": backend.fallback_mode(), "outcome": outcome}))
        """
    )
    env = {**os.environ, "NEURON_FALLBACK_MODE": "error"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"mode": "error", "outcome": ["aten.nonzero.default", "data-dependent-shape"]}


def test_suspended_blocks_neither_record_nor_raise(mode):
    from backend.fallback import suspended

    mode("error")
    x = torch.ones(2, device="neuron")
    with backend.collect_fallbacks() as events, suspended():
        torch.nonzero(x)  # compile-time work: not a fallback of the program
    assert events == []
    with pytest.raises(backend.NeuronFallbackError):
        torch.nonzero(x)


def test_host_kernel_gap_is_bridged_and_recorded():
    """MoE routers call torch.histc on int32 off-CPU; the CPU kernel lacks Int: still computed."""
    x = torch.tensor([0, 1, 1, 3], dtype=torch.int32, device="neuron")
    with backend.collect_fallbacks() as events:
        hist = torch.histc(x, bins=4, min=0, max=3)
    assert hist.dtype == torch.int32
    assert hist.cpu().tolist() == [1, 2, 0, 1]
    assert [(e.op, e.reason) for e in events] == [("aten.histc.default", "no-lowering")]


def test_indexing_a_bool_tensor_with_int_indices_is_native():
    """Only a boolean *index* makes advanced indexing data-dependent, not a boolean `self`."""
    mask = torch.tensor([[True, False], [False, True]], device="neuron")
    with backend.collect_fallbacks() as events:
        picked = mask[torch.tensor([1, 0], device="neuron")]
    assert events == []
    assert picked.cpu().tolist() == [[False, True], [True, False]]
    with backend.collect_fallbacks() as events:
        torch.arange(4.0, device="neuron")[torch.tensor([True, False, True, True], device="neuron")]
    assert [e.reason for e in events] == ["data-dependent-shape"]


def test_model_frame_is_the_first_frame_in_model_code_under_a_configured_root(table_without, tmp_path):
    from backend.fallback import set_model_code_roots

    table_without("aten.tanh")
    root = tmp_path / "mymodels"
    root.mkdir()
    (root / "modeling_tiny.py").write_text("import torch\n\ndef forward(x):\n    return torch.tanh(x)\n")
    sys.path.insert(0, str(root))
    previous = set_model_code_roots([str(root)])
    try:
        import modeling_tiny

        x = torch.randn(2, 3, device="neuron")
        with backend.collect_fallbacks() as events:
            line = _line()
            modeling_tiny.forward(x)
        with backend.collect_fallbacks() as outside:
            torch.tanh(x)
    finally:
        set_model_code_roots(previous)
        sys.path.remove(str(root))
        sys.modules.pop("modeling_tiny", None)
    (event,) = events
    assert event.model_frame == "mymodels/modeling_tiny.py:4"
    # the caller frame: the first frame outside torch/transformers/backend (the model file itself here)
    assert event.frame == f"{root / 'modeling_tiny.py'}:4" and line
    assert outside[0].model_frame is None  # no model code on the stack
