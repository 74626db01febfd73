"""The training step every stage agrees on: a train-mode forward, the loss, backward, the gradients.

The `backward`, `compile` and `numerics` stages and the CPU reference all run the step the same
way (train mode, harness/build/train_mode.py) and form the same loss from a model's output, so their
gradients are comparable: the model's own loss when the inputs carry labels, else a surrogate
(the mean square of every output that depends on a parameter).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from harness.build.train_mode import buffers_snapshot, restore_buffers
from harness.errors import NoLoss
from harness.stages.compare import float_tensors


def training_loss(output: Any) -> tuple[torch.Tensor, str]:
    """(scalar loss, "labels" | "surrogate"), in the output's precision (float32 at least)."""
    loss = getattr(output, "loss", None)
    if isinstance(output, dict) and loss is None:
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return _at_least_fp32(loss).sum(), "labels"
    # masked logits are -inf by design (grounding models): the surrogate uses the finite entries
    parts = [
        _at_least_fp32(t)[torch.isfinite(t)].pow(2).mean()
        for t in float_tensors(output)
        if t.requires_grad and bool(torch.isfinite(t).any())
    ]
    if not parts:
        raise NoLoss("no output depends on a trainable parameter")
    return torch.stack(parts).sum(), "surrogate"


def _at_least_fp32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


@contextlib.contextmanager
def train_mode(model: torch.nn.Module) -> Iterator[None]:
    """Train mode for one step (every dropout is 0: eval mode's values, BatchNorm on batch
    statistics), then eval mode again with the buffers a train-mode forward updated restored."""
    saved = buffers_snapshot(model)
    model.train()
    try:
        yield
    finally:
        model.eval()
        restore_buffers(model, saved)


def parameter_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """name -> gradient of every trainable parameter that received one (a tied weight: first name)."""
    return {n: p.grad for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def stash_grads(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    """Take every parameter's gradient out of the model (a second step must not accumulate into it)."""
    saved = {}
    for n, p in model.named_parameters():
        saved[n], p.grad = p.grad, None
    return saved


def restore_grads(model: torch.nn.Module, saved: dict[str, torch.Tensor | None]) -> None:
    for n, p in model.named_parameters():
        if n in saved:
            p.grad = saved[n]
