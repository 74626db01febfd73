"""Precision as on the hardware: fp32 matmul-class ops see bf16-rounded inputs by default.

Mode ``bf16`` (default) rounds the fp32 inputs listed in ``precision.yaml`` to bfloat16 before
the op and accumulates in fp32 (the Neuron compiler's default auto-cast). Mode ``exact``
(``NEURON_PRECISION=exact`` or :func:`set_precision`) computes exactly as the CPU does.
"""

from __future__ import annotations

import os
import warnings
from importlib import resources

import torch
import yaml

MODES = ("bf16", "exact")
ENV_VAR = "NEURON_PRECISION"
_ALIASES = {
    "default": "bf16",
    "auto": "bf16",
    "autocast": "bf16",
    "bf16": "bf16",
    "exact": "exact",
    "fp32": "exact",
}


def _from_env() -> str:
    raw = os.environ.get(ENV_VAR, "bf16").strip().lower() or "bf16"
    if raw not in _ALIASES:
        warnings.warn(f"{ENV_VAR}={raw!r} is not one of {MODES}; using 'bf16'")
        return "bf16"
    return _ALIASES[raw]


_mode = _from_env()
_table: dict[str, tuple[str, ...]] | None = None
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


def matmul_class() -> dict[str, tuple[str, ...]]:
    """Op packet -> names of the arguments rounded to bf16."""
    global _table
    if _table is None:
        text = resources.files("backend").joinpath("precision.yaml").read_text(encoding="utf-8")
        data = yaml.safe_load(text) or {}
        _table = {str(k): tuple(v) for k, v in (data.get("matmul_class") or {}).items()}
    return _table


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
