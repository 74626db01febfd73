"""The registry's public errors, one place: each derives from `HarnessError` and the built-in it
is a kind of, so a caller may catch either."""

from __future__ import annotations

from contracts.errors import HarnessError


class RegistryFormatError(HarnessError, ValueError):
    """A file that is not a registry of this schema version (message names path and versions)."""


class UnreplayableError(HarnessError, ValueError):
    """An argument the replay cannot rebuild (carries the reason shown in reports)."""


class TooLargeError(HarnessError, ValueError):
    """The case is beyond the replay budget and could not be scaled down consistently."""


class NoCpuKernelError(HarnessError, NotImplementedError):
    """PyTorch's CPU has no kernel for the call as recorded: it raised NotImplementedError (a dtype
    the kernel does not dispatch, such as `"histogram_cpu" not implemented for 'Int'`, or an op
    without a CPU kernel). The call itself is valid: a device ran it when it was recorded. That
    depends on the dtypes and the op only, never on the values the replay built, so the case has
    no reference and the harness built nothing wrong."""
