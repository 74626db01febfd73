"""Where the autograd engine runs the device's backward: on the calling thread, as for the CPU.

PyTorch's engine gives every accelerator device its own worker thread and hands each backward
over to it; the caller waits. A real device needs that thread to feed its queues while Python
goes on. The simulated device computes with CPU kernels, synchronously, so the thread only adds
two hand-offs (and a GIL hand-off) to every backward: ~0.3 ms of a 4.6 ms compiled tiny-BERT
training step (docs/backend.md, "Where the backward runs").

The engine's one switch is `torch.autograd.set_multithreading_enabled`, a thread-local flag:
`import backend` turns it off in the importing thread (the main thread, normally) when torch is
built without another accelerator — with one (a CUDA build), turning it off would move that
device's backward onto the calling thread too, so the default keeps PyTorch's threads there.
``NEURON_AUTOGRAD_THREAD=caller|device`` decides instead of the default; other threads keep
PyTorch's default (call :func:`apply` in them to change theirs).
"""

from __future__ import annotations

import os
import warnings

import torch

ENV_VAR = "NEURON_AUTOGRAD_THREAD"
MODES = ("caller", "device")


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
    """`caller` or `device`: the environment's choice, else `caller` on a CPU-only torch build."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw in MODES:
        return raw
    if raw:
        warnings.warn(f"{ENV_VAR}={raw!r}: use one of {MODES}; using the default", stacklevel=2)
    return "device" if _other_accelerator_built() else "caller"


def apply(mode: str | None = None) -> str:
    """Set this thread's autograd threading for `mode` (default: :func:`configured_mode`)."""
    mode = mode or configured_mode()
    if mode not in MODES:
        raise ValueError(f"autograd thread {mode!r}: use one of {MODES}")
    torch.autograd.set_multithreading_enabled(mode == "device")
    return mode
