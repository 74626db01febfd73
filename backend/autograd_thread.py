"""Where the autograd engine runs the device's backward: on the calling thread, as for the CPU.

PyTorch's engine gives every accelerator device its own worker thread and hands each backward
over to it; the caller waits. A real device needs that thread to feed its queues while Python
goes on. The simulated device computes with CPU kernels, synchronously, so the thread only adds
two hand-offs (and a GIL hand-off) to every backward (docs/backend.md, "Where the backward runs").

The engine's one switch is `torch.autograd.set_multithreading_enabled`, a thread-local flag:
`import backend` turns it off in the importing thread (the main thread, normally) when torch is
built without another accelerator — with one (a CUDA build), turning it off would move that
device's backward onto the calling thread too, so the default keeps PyTorch's threads there.
``NEURON_AUTOGRAD_THREAD=caller|device`` (`backend.settings`) decides instead; other threads keep
PyTorch's default (call :func:`apply` in them to change theirs).
"""

from __future__ import annotations

import torch

from backend import settings

MODES = settings.AUTOGRAD_THREADS


def _other_accelerator_built() -> str:
    """The accelerator this torch build also supports ("" for a CPU-only build)."""
    if torch.backends.cuda.is_built() or torch.version.hip:
        return "cuda"
    if torch.backends.mps.is_built():
        return "mps"
    if torch.xpu._is_compiled():
        return "xpu"
    return ""


def configured_mode() -> str:
    """`caller` or `device`: NEURON_AUTOGRAD_THREAD (read on every call), else `caller` on a
    CPU-only torch build."""
    return settings.current().autograd_thread or ("device" if _other_accelerator_built() else "caller")


def apply(mode: str | None = None) -> str:
    """Set this thread's autograd threading for `mode` (default: :func:`configured_mode`)."""
    mode = mode or configured_mode()
    if mode not in MODES:
        raise ValueError(f"autograd thread {mode!r}: use one of {MODES}")
    torch.autograd.set_multithreading_enabled(mode == "device")
    return mode
