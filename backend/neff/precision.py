"""The device's precision rule, applied inside compiled executables so they match eager.

Default (``bf16``): the fp32 inputs of matmul-class ops listed by the device
(``backend/precision.yaml``: op packet -> argument names) are rounded to bf16 and accumulate in
fp32, as the Neuron compiler's default auto-cast. ``NEURON_PRECISION=exact`` turns it off. The
eager device owns the rule (``backend.precision``); the compiler records the mode in the
artifact's flags and applies the same rounding to the same arguments.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch

# the module, not the `backend.precision()` function the package re-exports under that name
device_precision = importlib.import_module("backend.precision")


def current_mode() -> str:
    """``bf16`` or ``exact``: the device's current precision mode."""
    return "exact" if device_precision.precision() == "exact" else "bf16"


def mode_of(flags: dict[str, Any]) -> str:
    return "exact" if str(flags.get("precision", "bf16")) == "exact" else "bf16"


def _round(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return device_precision.round_bf16(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_round(v) for v in x)
    return x


def wrap(op: Callable[..., Any], name: str, mode: str) -> Callable[..., Any]:
    """`op` itself, or a version rounding the inputs the device rounds for this op."""
    names = device_precision.rounded_args(name) if mode == "bf16" else ()
    schema = getattr(op, "_schema", None)
    if not names or schema is None:
        return op
    positions = [i for i, a in enumerate(schema.arguments) if a.name in names]
    kw_names = set(names)

    def bf16_inputs(*args: Any, **kwargs: Any) -> Any:
        args = tuple(_round(a) if i in positions else a for i, a in enumerate(args))
        kwargs = {k: _round(v) if k in kw_names else v for k, v in kwargs.items()}
        return op(*args, **kwargs)

    bf16_inputs.__name__ = f"bf16_{name.replace('.', '_')}"
    return bf16_inputs
