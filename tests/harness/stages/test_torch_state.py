"""A stage that leaves PyTorch's process-wide modes behind must not fail the stages and models after
it in the same worker (Dynamo leaves inference mode on when it fails inside a forward decorated
with `@torch.inference_mode()`: 16 models after it on one nightly worker failed, 13 blamed on
the backend)."""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from contracts.status import Status
from harness.stages import check
from harness.stages.torch_state import restored_torch_state

BERT = ModelSpec("catalog/bert/BertForMaskedLM", "bert", "BertForMaskedLM")


def _backward_works() -> bool:
    x = torch.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    return x.grad is not None


def test_inference_mode_a_stage_leaks_is_put_back_and_named(monkeypatch):
    leaked_guards = []

    def leaky_compile(run):
        leaked_guards.append(torch._C._InferenceMode(True))  # entered and never left, as Dynamo's on an error
        raise RuntimeError("the compile failed")

    monkeypatch.setitem(check.STAGE_FUNCTIONS, "compile", leaky_compile)
    result = check.check_model(BERT, backend="neuron", stages=["compile", "numerics"])
    assert leaked_guards and not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    compile_stage = result.stages["compile"]
    assert compile_stage.status == Status.ERROR and "the compile failed" in compile_stage.reason
    assert "inference_mode" in compile_stage.metrics["torch_state_restored"]
    numerics = result.stages["numerics"]  # the stage after it runs as it would alone
    assert numerics.status == Status.PASS, numerics.reason
    assert "torch_state_restored" not in numerics.metrics
    assert _backward_works()


def test_grad_mode_and_default_dtype_come_back_and_modes_are_kept_inside():
    with torch.no_grad():
        with restored_torch_state() as leaked:
            assert not torch.is_grad_enabled()  # the guard around the block keeps the caller's modes
            torch.set_grad_enabled(True)
            torch.set_default_dtype(torch.float64)
        assert not torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
        assert leaked == ["grad_mode", "default_dtype"]
    with torch.inference_mode():
        with restored_torch_state() as leaked:
            assert torch.is_inference_mode_enabled()
        assert torch.is_inference_mode_enabled() and leaked == []
    assert not torch.is_inference_mode_enabled() and _backward_works()
