"""Every error of the simulated `neuron` device, in one hierarchy under `NeuronError`.

`NeuronError` itself inherits only `Exception`: each error below also inherits the one built-in
(or PyTorch) error it is a kind of, so callers catch either (`except ValueError` catches a
corrupt artifact, `except torch.OutOfMemoryError` the device's OOM). Errors carry structured
attributes (op, reason, feature, bytes, source, entry) so a harness classifies them without
parsing the message; their class names are part of the interface (harnesses record and match
them), so a class keeps its name wherever it is defined.

    NeuronError
    |-- NeuronFallbackError        RuntimeError       an op would fall back in mode 'error'
    |-- NeuronOutOfMemoryError     torch.OutOfMemoryError
    |-- NeuronUnsupportedError     NotImplementedError  sparse, nested, forward-mode AD
    |-- NeuronFaultError           RuntimeError       a planted fault of kind 'raise'
    |-- NeuronCompileError         RuntimeError       a graph failed to compile (no eager fallback)
    |   `-- DynamicShapeError      ValueError         symbolic shapes reached the compiler
    |-- CompileError               RuntimeError       the compiler rejected a partition
    |-- UnsupportedGraphError      ValueError         a graph the compiler cannot express
    |-- CorruptArtifactError       ValueError         a NEFF artifact failed verification
    |-- Unavailable                                   the native fast path cannot be used
    |-- SettingsError              ValueError         a NEURON_* variable with an invalid value
    `-- DataFileError              ValueError         a data file of the device is malformed
        |-- LoweringTableError                        backend/lowering_table.yaml, NEURON_LOWERING_TABLE
        `-- FaultFileError                            fault files, NEURON_FAULTS, planted faults

`NeuronFallbackWarning` (a `UserWarning`) is the device's one warning.
"""

from __future__ import annotations

import torch


class NeuronError(Exception):
    """Base class of every error raised by the simulated device."""


class NeuronFallbackWarning(UserWarning):
    """Emitted once per op when an op falls back to the CPU in fallback mode ``warn``."""


class NeuronFallbackError(NeuronError, RuntimeError):
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


class NeuronFaultError(NeuronError, RuntimeError):
    """A planted fault of kind ``raise`` (backend.faults): the op failed on the device."""

    def __init__(self, op: str, fault: str, message: str = "") -> None:
        self.op = op
        self.fault = fault
        super().__init__(message or f"neuron: {op} failed on the device (planted fault {fault!r})")


# ------------------------------------------------------------------------------ the compiler


class NeuronCompileError(NeuronError, RuntimeError):
    """The neuron compiler failed on a graph (and the eager fallback switch is off)."""


class DynamicShapeError(NeuronCompileError, ValueError):
    """Symbolic shapes reached the neuron compiler, which only compiles static shapes."""


class CompileError(NeuronError, RuntimeError):
    """The compiler rejected a partition (an injected failure or an inexpressible graph)."""


class UnsupportedGraphError(NeuronError, ValueError):
    """A graph the compiler cannot express (non-aten call, symbolic shape, unknown argument)."""


class CorruptArtifactError(NeuronError, ValueError):
    """An artifact whose envelope, checksum or body does not verify: never run it."""


class Unavailable(NeuronError):
    """The native fast path cannot be used in this process; the message says why."""


# ------------------------------------------------------------------------------ configuration


class SettingsError(NeuronError, ValueError):
    """A device variable (``NEURON_*``) holds a value the device does not accept.

    Message: ``NEURON_COMPILER='gcc' is not valid: use interpreter or inductor``.
    """

    def __init__(self, variable: str, value: str, accepted: str) -> None:
        self.variable = variable
        self.value = value
        self.accepted = accepted
        super().__init__(f"{variable}={value!r} is not valid: use {accepted}")


class DataFileError(NeuronError, ValueError):
    """A data file of the device is unreadable or has a bad entry; the message names the file,
    the entry and (for an unknown or invalid key) the key."""

    kind = "data file"

    def __init__(self, source: str, entry: str, problem: str) -> None:
        self.source = source
        self.entry = entry
        self.problem = problem
        super().__init__(f"malformed {self.kind} {source}: entry {entry!r}: {problem}")


class LoweringTableError(DataFileError):
    """A lowering table failed to load; the message names the file and the offending entry."""

    kind = "lowering table"


class FaultFileError(DataFileError):
    """A fault file or planted fault is malformed; the message names the source and the entry."""

    kind = "fault file"


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
