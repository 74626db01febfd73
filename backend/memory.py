"""Simulated device memory: bytes of live device storages, a peak, and a capacity.

Capacity defaults to 96 GiB (one Trainium2 device); ``NEURON_MEMORY_CAPACITY`` (bytes, or with a
suffix: ``512MiB``, ``96GiB``, ``1.5GB``) or :func:`set_memory_capacity` changes it. An allocation
past the capacity raises :class:`~backend.errors.NeuronOutOfMemoryError` naming the request, the
capacity and the use.
"""

from __future__ import annotations

import threading

from backend import settings
from backend.errors import NeuronOutOfMemoryError
from backend.settings import parse_bytes


def _capacity_from_env() -> int:
    return settings.current().memory_capacity


_lock = threading.Lock()
_capacity = _capacity_from_env()  # read at import; set_memory_capacity changes it
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
