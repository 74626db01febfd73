"""Bridge between neuron tensors and the host payloads an executable runs on.

Compiled partitions run on the CPU payloads of their neuron inputs (``backend.storage.cpu_view``:
the payload seen through the tensor's layout, no copy) and hand back host results adopted as
new neuron tensors (``backend.storage.from_cpu``: no copy, memory accounted by the device).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from backend import storage

DEVICE = "neuron"


def to_host(t: Any) -> Any:
    """The host tensor holding a neuron tensor's data (no copy)."""
    if isinstance(t, torch.Tensor) and t.device.type == DEVICE:
        return storage.cpu_view(t)
    return t


def to_device(t: Any) -> Any:
    """A neuron tensor adopting a host result (no copy)."""
    return storage.from_cpu(t) if isinstance(t, torch.Tensor) else t


def adopter() -> Callable[[torch.Tensor], torch.Tensor]:
    """`from_cpu` of the native path when it is installed (one C++ call per result), else Python's."""
    from backend import native

    mod = native.module()
    return mod.from_cpu if mod is not None and mod.is_installed() else storage.from_cpu
