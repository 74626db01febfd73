"""The agents' public errors, one place: each derives from `HarnessError` and the built-in it is
a kind of, so a caller may catch either."""

from __future__ import annotations

from contracts.errors import HarnessError


class CrawlError(HarnessError, RuntimeError):
    """A crawl cannot start or continue (offline mode, incompatible state, listing failure)."""
