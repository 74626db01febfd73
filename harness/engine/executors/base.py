"""What an executor is: it runs chunks of a tier's cases and hands their outcomes to the runner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from contracts.records import Case, CaseOutcome

Chunk = tuple[list[Case], bool]  # (cases, run them with the tier's execute_many)
OnResults = Callable[[list[CaseOutcome]], None]


class Executor(Protocol):
    def run(self, chunks: list[Chunk], on_results: OnResults) -> None: ...

    def drain(self) -> None:
        """Start no new chunk (called from on_results); chunks already running finish."""
