"""A backend that lowers functions above the dispatcher (its own TorchFunctionMode), so the shadow's
dispatch mode never sees the failing call: an error is still named from its exception, or from the
function call that raised, placed in the model; a backward that finds a loss without autograd
history is charged to the first call that lost it. The device here is the CPU behind a function
mode, registered as a test-only backend."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode

from contracts import backends
from contracts.records import ModelSpec
from contracts.rootcause import ROUTES, RootCause
from contracts.status import Status
from harness.rootcause.localize import check_with_root_cause

BERT = ModelSpec("catalog/bert", "bert", "BertForMaskedLM")
EAGER = ["load", "forward", "backward"]

pytestmark = pytest.mark.slow


class _Lowering(TorchFunctionMode):
    """Lowers `func` whole, above the dispatcher: raises `error`, or computes it without autograd."""

    def __init__(self, func, error: BaseException | None) -> None:
        super().__init__()
        self.func, self.error = func, error

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is self.func:
            if self.error is not None:
                raise self.error
            with torch.no_grad():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


class FunctionLevelDevice(backends.BackendDefaults):
    device_type = "cpu"
    simulated = None

    def __init__(self, name: str, func, error: BaseException | None) -> None:
        self.name, self.func, self.error = name, func, error

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @contextlib.contextmanager
    def device_scope(self) -> Iterator[None]:
        with _Lowering(self.func, self.error):
            yield

    def describe(self) -> dict:
        return backends.describe_common(self) | {"versions": {}, "settings": {}}


@pytest.fixture
def lowering():
    made: list[str] = []

    def register(name: str, func, error: BaseException | None = None) -> str:
        backends.register_backend(name, lambda _name: FunctionLevelDevice(name, func, error))
        made.append(name)
        return name

    yield register
    for name in made:
        backends._REGISTERED.pop(name, None)
        backends._CACHE.pop(name, None)


def _rc(result, stage: str) -> RootCause:
    row = result.stages[stage]
    assert row.status is Status.ERROR and row.blame == "backend", (row.status, row.blame, row.reason)
    assert row.root_cause, f"{stage}: no root cause"
    return RootCause.from_dict(row.root_cause)


def test_the_new_routes_are_declared():
    assert {"exception", "function_shadow"} <= set(ROUTES)


def test_an_error_naming_its_op_above_the_dispatcher_is_that_op_placed_in_the_model(lowering):
    name = lowering(
        "fn-lowering-named",
        torch.nn.functional.gelu,
        NotImplementedError("Operator with name aten::gelu has no lowering"),
    )
    rc = _rc(check_with_root_cause(BERT, name, EAGER, force=True), "forward")
    assert (rc.found, rc.op, rc.route, rc.kind, rc.phase) == (
        True,
        "aten.gelu",
        "exception",
        "error",
        "forward",
    )
    assert rc.module_path.startswith("bert.encoder.layer.0.intermediate"), rc.module_path
    assert rc.source_line.startswith("modeling_bert.py:"), rc.source_line
    assert rc.error_class == "NotImplementedError" and rc.repro is None and "no repro" in rc.why
    from harness.cli.explain import describe

    assert describe(rc)[0] == "root cause: aten.gelu (error, forward, found by exception)"


def test_an_error_naming_no_op_is_the_function_call_that_raised(lowering):
    name = lowering("fn-lowering-unnamed", torch.nn.functional.gelu, AssertionError("cannot lower this"))
    rc = _rc(check_with_root_cause(BERT, name, EAGER, force=True), "forward")
    assert (rc.found, rc.op, rc.route) == (True, "torch.nn.functional.gelu", "exception")
    assert rc.input_shapes and len(rc.input_shapes[0]) == 3 and rc.input_dtypes[0] == "float32"
    assert rc.module_path.startswith("bert.encoder.layer.0.intermediate"), rc.module_path


def test_a_loss_without_autograd_history_is_the_first_call_that_lost_it(lowering):
    # the device's `Tensor.sum` keeps no autograd history: the training loss's reduction loses it
    name = lowering("fn-lowering-nograd", torch.Tensor.sum)
    result = check_with_root_cause(BERT, name, EAGER, force=True)
    assert result.stages["forward"].status is Status.PASS
    rc = _rc(result, "backward")
    assert "does not require grad" in result.stages["backward"].message
    assert (rc.found, rc.op, rc.route, rc.phase, rc.kind) == (
        True,
        "torch.Tensor.sum",
        "function_shadow",
        "forward",
        "error",
    )
    assert "without autograd history" in rc.why and rc.extra["outputs_without_grad"] == [0]
    assert rc.call_index is not None and rc.repro is None
