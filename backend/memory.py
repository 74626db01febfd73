"""Simulated device memory: bytes of live device storages, a peak, and a capacity.

Capacity defaults to 96 GiB (one Trainium2 device); ``NEURON_MEMORY_CAPACITY`` (bytes, or with a
suffix: ``512MiB``, ``96GiB``, ``1.5GB``) or :func:`set_memory_capacity` changes it. An allocation
past the capacity raises :class:`~backend.errors.NeuronOutOfMemoryError` naming the request, the
capacity and the use.
"""

from __future__ import annotations

import os
import re
import threading

from backend.errors import NeuronOutOfMemoryError

ENV_VAR = "NEURON_MEMORY_CAPACITY"
DEFAULT_CAPACITY = 96 << 30
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_bytes(text: str | int) -> int:
    """'96GiB' -> 103079215104; '1.5GB' -> 1500000000; 4096 -> 4096. Raises ValueError."""
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(
                f"cannot parse memory size {text!r}: use bytes or a number with a unit "
                f"(KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            )
        value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"memory capacity must be positive, got {text!r}")
    return value


def _capacity_from_env() -> int:
    raw = os.environ.get(ENV_VAR)
    if not raw:
        return DEFAULT_CAPACITY
    try:
        return parse_bytes(raw)
    except ValueError as exc:
        import warnings

        warnings.warn(f"{ENV_VAR}: {exc}; using the default of 96 GiB")
        return DEFAULT_CAPACITY


_lock = threading.Lock()
_capacity = _capacity_from_env()
_allocated = 0
_peak = 0


def allocate(nbytes: int) -> None:
    """Account an allocation, or raise the OOM error without changing anything."""
    global _allocated, _peak
    with _lock:
        if _allocated + nbytes > _capacity:
            raise NeuronOutOfMemoryError(nbytes, _capacity, _allocated)
        _allocated += nbytes
        if _allocated > _peak:
            _peak = _allocated


def free(nbytes: int) -> None:
    global _allocated
    with _lock:
        _allocated -= nbytes


def memory_allocated() -> int:
    return _allocated


def max_memory_allocated() -> int:
    return _peak


def reset_peak_memory_stats() -> None:
    global _peak
    with _lock:
        _peak = _allocated


def memory_capacity() -> int:
    return _capacity


def set_memory_capacity(capacity: int | str | None) -> int:
    """Set the capacity (bytes or '16GiB'; None: env/default). Returns the previous capacity."""
    global _capacity
    new = _capacity_from_env() if capacity is None else parse_bytes(capacity)
    with _lock:
        previous, _capacity = _capacity, new
    return previous
