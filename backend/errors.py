"""Errors of the simulated `neuron` device.

Each error inherits a built-in PyTorch/Python error so callers can catch either, and carries
structured attributes (op, reason, feature, bytes) so the harness can classify it without
parsing the message.
"""

from __future__ import annotations

import torch


class NeuronError(RuntimeError):
    """Base class of every error raised by the simulated device."""


class NeuronFallbackError(NeuronError):
    """An op would run through the CPU fallback while the fallback mode is ``error``.

    Message: ``neuron: aten.nonzero.default has no native lowering (reason: data-dependent-shape)
    and NEURON_FALLBACK_MODE=error``.
    """

    def __init__(self, op: str, reason: str, frame: str = "") -> None:
        self.op = op
        self.reason = reason
        self.frame = frame
        where = f" at {frame}" if frame else ""
        super().__init__(
            f"neuron: {op} has no native lowering (reason: {reason}){where} and the fallback "
            f"mode is 'error' (NEURON_FALLBACK_MODE=error); set it to 'record' or 'warn' to run "
            f"it on the CPU"
        )


class NeuronOutOfMemoryError(torch.OutOfMemoryError, NeuronError):
    """An allocation would exceed the simulated device memory capacity.

    Subclass of ``torch.OutOfMemoryError`` so code that handles CUDA OOMs handles this one too.
    """

    def __init__(self, requested: int, capacity: int, in_use: int) -> None:
        self.requested = requested
        self.capacity = capacity
        self.in_use = in_use
        super().__init__(
            f"neuron out of memory: tried to allocate {_fmt(requested)} ({requested} bytes) with "
            f"{_fmt(in_use)} ({in_use} bytes) in use of a capacity of {_fmt(capacity)} "
            f"({capacity} bytes); {_fmt(max(capacity - in_use, 0))} free. Raise the capacity with "
            f"NEURON_MEMORY_CAPACITY or backend.set_memory_capacity()"
        )


class NeuronUnsupportedError(NeuronError, NotImplementedError):
    """A feature the device declares unsupported (sparse tensors, NestedTensor, forward-mode AD)."""

    def __init__(self, feature: str, detail: str = "") -> None:
        self.feature = feature
        extra = f": {detail}" if detail else ""
        super().__init__(f"neuron does not support {feature}{extra}")


class LoweringTableError(ValueError):
    """A lowering table failed to load; the message names the file and the offending entry."""

    def __init__(self, source: str, entry: str, problem: str) -> None:
        self.source = source
        self.entry = entry
        self.problem = problem
        super().__init__(f"malformed lowering table {source}: entry {entry!r}: {problem}")


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


class NeuronFaultError(NeuronError):
    """A planted fault of kind ``raise`` (backend.faults): the op failed on the device."""

    def __init__(self, op: str, fault: str, message: str = "") -> None:
        self.op = op
        self.fault = fault
        super().__init__(message or f"neuron: {op} failed on the device (planted fault {fault!r})")


class FaultFileError(ValueError):
    """A fault file or planted fault is malformed; the message names the source and the entry."""

    def __init__(self, source: str, entry: str, problem: str) -> None:
        self.source = source
        self.entry = entry
        self.problem = problem
        super().__init__(f"malformed fault file {source}: entry {entry!r}: {problem}")
