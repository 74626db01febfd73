"""The device's precision rule, applied inside compiled executables so they match eager.

Default (``bf16``): fp32 inputs of matmul-class ops are rounded to bf16, accumulation stays fp32,
as the Neuron compiler's default auto-cast. ``NEURON_PRECISION=exact`` turns it off. The eager
device owns the rule; this module asks it (``backend.precision``) and only falls back to reading
the same environment variable when the device does not expose one.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

#: aten ops whose fp32 tensor inputs are rounded to bf16 in the default precision mode.
MATMUL_CLASS = frozenset(
    {
        "aten.mm.default",
        "aten.bmm.default",
        "aten.addmm.default",
        "aten.baddbmm.default",
        "aten.matmul.default",
        "aten.linear.default",
        "aten.convolution.default",
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "aten._scaled_dot_product_attention_math.default",
        "aten.scaled_dot_product_attention.default",
    }
)


def current_mode() -> str:
    """``bf16`` or ``exact``: the device's current precision mode."""
    try:  # the eager device is the source of truth when it exposes the rule
        from backend import precision as device_precision  # type: ignore[attr-defined]

        getter = getattr(device_precision, "get_precision", None) or getattr(device_precision, "current_mode")
        mode = str(getter())
    except Exception:
        mode = os.environ.get("NEURON_PRECISION", "bf16")
    return "exact" if mode.strip().lower() == "exact" else "bf16"


def mode_of(flags: dict[str, Any]) -> str:
    return "exact" if str(flags.get("precision", "bf16")) == "exact" else "bf16"


def _round(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype == torch.float32:
        return x.to(torch.bfloat16).to(torch.float32)
    if isinstance(x, (list, tuple)):
        return type(x)(_round(v) for v in x)
    return x


def wrap(op: Callable[..., Any], name: str, mode: str) -> Callable[..., Any]:
    """`op` itself, or a version rounding its fp32 tensor inputs when the mode asks for it."""
    if mode != "bf16" or name not in MATMUL_CLASS:
        return op

    def bf16_inputs(*args: Any, **kwargs: Any) -> Any:
        return op(*_round(args), **{k: _round(v) for k, v in kwargs.items()})

    bf16_inputs.__name__ = f"bf16_{name.replace('.', '_')}"
    return bf16_inputs
