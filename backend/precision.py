"""Precision as on the hardware: fp32 matmul-class ops see bf16-rounded inputs by default.

Mode ``bf16`` (default) rounds the fp32 inputs listed in ``precision.yaml`` to bfloat16 before
the op and accumulates in fp32 (the Neuron compiler's default auto-cast). Mode ``exact``
(``NEURON_PRECISION=exact`` or :func:`set_precision`) computes exactly as the CPU does.
"""

from __future__ import annotations

import functools

import torch

from backend import settings
from backend.data_files import DataModel, bundled, load_data

MODES = settings.PRECISION_MODES
_ALIASES = settings.PRECISION_ALIASES

_mode = settings.current().precision  # read at import; set_precision changes it
_listeners: list = []


def on_change(callback) -> None:
    """Call ``callback(mode)`` after every precision change (the native path caches decisions)."""
    _listeners.append(callback)


def precision() -> str:
    return _mode


def set_precision(mode: str) -> str:
    """Set ``bf16`` or ``exact``; returns the previous mode."""
    global _mode
    if mode not in _ALIASES:
        raise ValueError(f"precision must be one of {MODES}, got {mode!r}")
    previous, _mode = _mode, _ALIASES[mode]
    for callback in _listeners:
        callback(_mode)
    return previous


class PrecisionTable(DataModel):
    """``precision.yaml``: op packet -> the argument names rounded to bf16 in mode ``bf16``."""

    matmul_class: dict[str, list[str]]


@functools.cache
def matmul_class() -> dict[str, tuple[str, ...]]:
    """Op packet -> names of the arguments rounded to bf16 (precision.yaml, read once)."""
    table = load_data(PrecisionTable, bundled("backend", "precision.yaml"))
    return {packet: tuple(args) for packet, args in table.matmul_class.items()}


def rounded_args(op_name: str) -> tuple[str, ...]:
    """Argument names to round for an overload name like 'aten.addmm.out' (empty: none)."""
    packet = op_name.rsplit(".", 1)[0] if op_name.count(".") >= 2 else op_name
    return matmul_class().get(packet, ())


_FLOAT32 = torch.float32


def round_bf16(t: torch.Tensor) -> torch.Tensor:
    """fp32 tensor rounded to the nearest bf16 value, kept in fp32 (others are returned as is)."""
    if t.dtype is _FLOAT32:
        # .bfloat16()/.float() take the short argument-parsing path of .to(dtype): same values
        return t.bfloat16().float()
    return t
