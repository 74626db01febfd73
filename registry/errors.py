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
