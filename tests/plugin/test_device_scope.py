"""Where device work happens: the harness enters the adapter's device scope only around the
device's part of a stage. A scope that raises on CPU work (float64 math: the numerics reference;
meta tensors: shape planning) proves the reference, the blame re-run and meta planning run outside
it, and a scope that records what it sees proves the device's own work runs inside it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from contracts import backends
from contracts.records import ModelSpec
from contracts.status import Status


class CPUWorkInDeviceScope(AssertionError):
    pass


class _Strict(TorchDispatchMode):
    """Inside the scope: records every op; raises on what only the harness's CPU work does, and on
    the ops the 'device' is told to lack."""

    def __init__(self, seen: list[str], lacks: tuple[str, ...]) -> None:
        super().__init__()
        self.seen, self.lacks = seen, lacks

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and (t.dtype == torch.float64 or t.device.type == "meta"):
                raise CPUWorkInDeviceScope(
                    f"{func} on a {t.dtype} {t.device.type} tensor in the device scope"
                )
        if name in self.lacks:
            raise NotImplementedError(f"the device has no kernel for {name}")
        self.seen.append(name)
        return func(*args, **kwargs)


class ScopedDevice(backends.BackendDefaults):
    """The CPU as a device whose work must all happen in its scope."""

    device_type = "cpu"
    simulated = None

    def __init__(self, name: str, lacks: tuple[str, ...] = ()) -> None:
        self.name, self.lacks = name, lacks
        self.seen: list[str] = []
        self.entered = 0

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @contextlib.contextmanager
    def device_scope(self) -> Iterator[None]:
        self.entered += 1
        with _Strict(self.seen, self.lacks):
            yield

    def describe(self) -> dict:
        return backends.describe_common(self) | {"versions": {}, "settings": {}}


@pytest.fixture
def scoped():
    made: list[str] = []

    def register(name: str, **kw) -> ScopedDevice:
        adapter = ScopedDevice(name, **kw)
        backends.register_backend(name, lambda _name: adapter)
        made.append(name)
        return adapter

    yield register
    for name in made:
        backends._REGISTERED.pop(name, None)
        backends._CACHE.pop(name, None)


def _no_cpu_work_in_scope(result) -> None:
    for r in result.stages.values():
        assert "CPUWorkInDeviceScope" not in f"{r.error_class} {r.reason} {r.message}", (r.stage, r.reason)


def test_the_reference_runs_outside_the_device_scope_and_the_device_work_inside(scoped):
    from harness.stages.check import check_model

    adapter = scoped("scoped-test")
    spec = ModelSpec("catalog/bert", "bert", "BertForMaskedLM")
    result = check_model(spec, backend="scoped-test", stages=["load", "forward", "backward", "numerics"])
    _no_cpu_work_in_scope(result)
    assert {s: r.status for s, r in result.stages.items()} == {
        "load": Status.PASS,
        "forward": Status.PASS,
        "backward": Status.PASS,
        "numerics": Status.PASS,
    }
    # the float64 truth was computed (inside the scope it would have raised and fallen back to fp32)
    assert result.stages["numerics"].metrics["reference"] == "cpu_float64"
    assert adapter.entered > 0
    assert {"aten.mm", "aten.addmm"} & set(adapter.seen)  # the model's matmuls ran in the scope
    assert "aten._to_copy" in adapter.seen  # the outputs left the device in the scope


def test_the_blame_rerun_runs_outside_the_device_scope(scoped):
    """The device lacks an op: its forward fails; the reference re-run (outside the scope) passes,
    so the failure is the backend's. Inside the scope the re-run would fail the same way."""
    from harness.blame.probe import check_with_blame

    scoped("scoped-lacking", lacks=("aten.gelu",))
    spec = ModelSpec("catalog/bert", "bert", "BertForMaskedLM")
    result = check_with_blame(spec, backend="scoped-lacking", stages=["load", "forward"])
    _no_cpu_work_in_scope(result)
    forward = result.stages["forward"]
    assert forward.status == Status.ERROR and "no kernel for aten.gelu" in forward.message
    assert forward.blame == "backend" and forward.blame_evidence["why"] == "the reference passes this stage"


def test_meta_shape_planning_and_the_op_reference_run_outside_the_device_scope(scoped):
    """A unit case over the shape budget is planned on the meta device and referenced on the CPU
    before its device run: with the planning in the scope it would be skipped, not scaled."""
    from registry.encoding import signature
    from registry.oplog import parse_call
    from registry.replay import CaseSpec, replay

    adapter = scoped("scoped-replay")
    args, kwargs = parse_call("aten._softmax.default", "((T([64, 256, 256], f32), -1, False), {})")
    result = replay(CaseSpec("aten._softmax.default", signature(args, kwargs), {}), adapter, max_numel=2**12)
    assert result.status == Status.PASS, result.reason
    assert result.metrics["scaled_by"] > 1
    assert adapter.seen.count("aten._softmax") >= 1  # the op itself ran in the scope
