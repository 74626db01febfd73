"""PyTorch's process-wide modes, put back after every stage.

A worker runs many models one after the other, so a mode one model leaves behind fails the next
ones for a reason that is neither theirs nor the backend's. It happens: when Dynamo fails while
compiling a forward decorated with `@torch.inference_mode()` (SAM-3's video tracker), inference
mode stays on, and every later stage of the worker ran in it (16 of the 17 models after it on
one nightly worker failed as "Inference tensors ...", 13 of them blamed on the backend).

    with restored_torch_state() as leaked:
        run the stage
    leaked  # ["inference_mode"]: what the stage left behind (and was put back)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def restored_torch_state() -> Iterator[list[str]]:
    """Grad mode, inference mode and the default dtype as they were before the block.

    Inference mode cannot be switched off by a setter; a guard of the current mode is entered
    around the block, and leaving it restores the autograd state (grad mode too) and dispatch keys
    it saved (what a leaked guard changed underneath is dropped with it)."""
    grad, inference, dtype = (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
    )
    leaked: list[str] = []
    with torch.inference_mode(inference):
        torch.set_grad_enabled(grad)  # the guard sets grad mode from its own flag
        try:
            yield leaked
        finally:
            leaked += [
                name
                for name, before, after in (
                    ("grad_mode", grad, torch.is_grad_enabled()),
                    ("inference_mode", inference, torch.is_inference_mode_enabled()),
                    ("default_dtype", dtype, torch.get_default_dtype()),
                )
                if before != after
            ]
            torch.set_default_dtype(dtype)
