"""The reports' public errors, one place: each derives from `HarnessError` and the built-in it is
a kind of, so a caller may catch either."""

from __future__ import annotations

from contracts.errors import HarnessError


class SchemaVersionError(HarnessError, ValueError):
    """A table was written by a newer schema than this harness reads."""
