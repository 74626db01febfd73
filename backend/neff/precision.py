"""The device's precision rule, applied inside compiled executables so they match eager.

Default (``bf16``): the fp32 inputs of matmul-class ops listed by the device
(``backend/precision.yaml``: op packet -> argument names) are rounded to bf16 and accumulate in
fp32, as the Neuron compiler's default auto-cast. ``NEURON_PRECISION=exact`` turns it off. The
eager device owns the rule (``backend.precision``); the compiler records the mode in the
artifact's flags and applies the same rounding to the same arguments.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

# the module, not the `backend.precision()` function the package re-exports under that name
device_precision = importlib.import_module("backend.precision")


def current_mode() -> str:
    """``bf16`` or ``exact``: the device's current precision mode."""
    return "exact" if device_precision.precision() == "exact" else "bf16"


def mode_of(flags: dict[str, Any]) -> str:
    return "exact" if str(flags.get("precision", "bf16")) == "exact" else "bf16"


class _WeightRounding(threading.local):
    """Rounded copies of parameters, reused while the parameter's version counter is unchanged.

    A compiled step would otherwise convert every fp32 weight to bf16 and back on every call; the
    hardware keeps bf16 weights instead. Only inputs the caller declares (parameters, with their
    device version counter) are cached; the weakref check makes a recycled id() a miss.
    """

    def __init__(self) -> None:
        self.versions: dict[int, int] | None = None
        self.entries: dict[tuple, tuple[Any, torch.Tensor]] = {}


_weights = _WeightRounding()
_MAX_ROUNDED = 4096


@contextlib.contextmanager
def cached_weight_rounding(versions: dict[int, int]) -> Iterator[None]:
    """Within the block, host tensors whose id() is in `versions` (id -> version) are parameters."""
    previous, _weights.versions = _weights.versions, versions
    try:
        yield
    finally:
        _weights.versions = previous


def _round_tensor(x: torch.Tensor) -> torch.Tensor:
    versions = _weights.versions
    if versions and x.dtype == torch.float32:
        base = x._base if x._base is not None else x
        version = versions.get(id(base))
        if version is not None:
            key = (id(base), version, tuple(x.shape), x.stride(), x.storage_offset())
            hit = _weights.entries.get(key)
            if hit is not None and hit[0]() is base:
                return hit[1]
            rounded = device_precision.round_bf16(x)
            if len(_weights.entries) >= _MAX_ROUNDED:
                _weights.entries.clear()
            _weights.entries[key] = (weakref.ref(base), rounded)
            return rounded
    return device_precision.round_bf16(x)


def _round(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return _round_tensor(x)
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
