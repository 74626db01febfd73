"""Which layer of a model a failing forward stopped in, and whether its own weights disagree with
the width it was given by the layer before it.

A probe of the unshrunk default fed the harness' synthesized inputs is no evidence in general (it
repeats the harness' own input mistakes). One finding is independent of them: a layer *inside*
the model (none of its inputs is a model input) whose input width is not the width its weights
take (a conv of 12 input channels given the backbone's 384). The layers before it were built from
the model's own config, so the model's layers disagree with each other whatever the input values
and sizes were (PP-OCRv6's neck vs its backbone, UVDoc's bridge).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def _expected(module: nn.Module, x: torch.Tensor) -> tuple[Any, Any] | None:
    """(width the layer's weights take, width it got), or None when it is no width layer or they agree."""
    if isinstance(module, nn.Linear):
        want, got = module.in_features, x.shape[-1] if x.dim() else None
    elif isinstance(module, nn.modules.conv._ConvNd) and not isinstance(
        module, nn.modules.conv._ConvTransposeNd
    ):
        want, got = module.in_channels, x.shape[1] if x.dim() == len(module.kernel_size) + 2 else None
    elif isinstance(module, nn.LayerNorm):
        n = len(module.normalized_shape)
        want, got = list(module.normalized_shape), list(x.shape[-n:])
    elif isinstance(module, (nn.GroupNorm, nn.modules.batchnorm._BatchNorm)) and x.dim() >= 2:
        want = module.num_channels if isinstance(module, nn.GroupNorm) else module.num_features
        got = x.shape[1]
    else:
        return None
    return None if got is None or want == got else (want, got)


@contextlib.contextmanager
def watch_layers(model: nn.Module) -> Iterator[dict[str, Any]]:
    """Track the width layer a forward is inside of; after an exception `found["layer"]` names it
    (the layer that raised) with its input's shape, or is absent when no such layer raised."""
    found: dict[str, Any] = {}
    handles = []

    def enter(name: str):
        def hook(module, args, kwargs):
            x = args[0] if args else next(iter(kwargs.values()), None)
            found["current"] = (name, module, x)

        return hook

    def leave(module, args, kwargs, output):
        found.pop("current", None)

    for name, module in model.named_modules():
        if isinstance(
            module,
            (nn.Linear, nn.modules.conv._ConvNd, nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm),
        ):
            handles.append(module.register_forward_pre_hook(enter(name), with_kwargs=True))
            handles.append(module.register_forward_hook(leave, with_kwargs=True))
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


def interior_width_mismatch(found: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any] | None:
    """The layer a failed forward stopped in, when its weights take another width than its input
    has and that input is no model input (same shape as none of them): evidence, else None."""
    current = found.get("current")
    if not current:
        return None
    name, module, x = current
    if not isinstance(x, torch.Tensor):
        return None
    mismatch = _expected(module, x)
    if mismatch is None:
        return None
    shapes = {tuple(v.shape) for v in inputs.values() if isinstance(v, torch.Tensor)}
    if tuple(x.shape) in shapes:
        return None  # the model's input itself: its layout is the harness' choice
    return {
        "layer": name,
        "layer_class": type(module).__name__,
        "weights_take": mismatch[0],
        "input_has": mismatch[1],
        "input_shape": list(x.shape),
    }
