"""``torch.neuron``: the device module PyTorch looks up for the `neuron` device.

Registered by :mod:`backend.device`; mirrors the ``torch.cuda`` functions the harness and
PyTorch itself call (seeding, memory statistics, synchronize, autocast dtypes).
"""

from __future__ import annotations

import contextlib
import sys

import torch

from backend import memory
from backend.kernels import generator as _generator

_current = 0


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    return None


def device_count() -> int:
    return 1


def current_device() -> int:
    return _current


def set_device(device) -> None:
    index = torch.device("neuron", device).index if isinstance(device, int) else torch.device(device).index
    if index not in (None, 0):
        raise ValueError(f"neuron has 1 simulated device; got device index {index}")


@contextlib.contextmanager
def device(index=0):
    set_device(index)
    yield


def get_device_name(device=None) -> str:
    return "neuron (simulated Trainium)"


def synchronize(device=None) -> None:
    """A sync point: flush adaptive eager's pending graph; otherwise execution is synchronous."""
    adaptive = sys.modules.get("backend.adaptive")
    if adaptive is not None:
        adaptive.synchronize()


# ---- random numbers: the device has its own generator
def manual_seed(seed: int) -> None:
    _generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    _generator.manual_seed(int(seed))


def seed() -> None:
    _generator.seed()


def seed_all() -> None:
    _generator.seed()


def initial_seed() -> int:
    return _generator.initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return _generator.get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    _generator.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [_generator.get_state()]


def set_rng_state_all(states) -> None:
    _generator.set_state(states[0])


# ---- memory (simulated; see backend.memory)
def memory_allocated(device=None) -> int:
    return memory.memory_allocated()


def max_memory_allocated(device=None) -> int:
    return memory.max_memory_allocated()


def reset_peak_memory_stats(device=None) -> None:
    memory.reset_peak_memory_stats()


def memory_reserved(device=None) -> int:
    return memory.memory_allocated()


def max_memory_reserved(device=None) -> int:
    return memory.max_memory_allocated()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes, like torch.cuda.mem_get_info."""
    return memory.memory_capacity() - memory.memory_allocated(), memory.memory_capacity()


def empty_cache() -> None:
    return None


# ---- autocast
def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True
