"""What an executor is: it runs chunks of a tier's cases and hands their outcomes to the runner."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from contracts.records import Case, CaseOutcome


class Chunk(NamedTuple):
    """Cases a worker runs in one request, and how (harness.engine.limits plans them)."""

    cases: list[Case]
    many: bool  # run them with the tier's execute_many
    timeout: float | None = None  # seconds for the whole chunk (None: the worker's limit)
    diagnose: bool = False  # alone, under the call journal (a death names its op)
    case_timeouts: dict[str, float] | None = None  # each case's own limit, for re-runs after a death
    spare: bool = False  # it is expected to die: a spare worker starts beside it


OnResults = Callable[[list[CaseOutcome]], None]


class Plan(Protocol):
    """What the runner's schedule (harness.engine.limits.Schedule) offers an executor."""

    def refine(self, chunk: Chunk) -> list[Chunk]:
        """The chunk as it should run now (what the run learnt since it was planned: ops known to
        hang or crash run their cases alone)."""
        ...

    def case_limit(self, case: Case, planned: float) -> float:
        """A case's limit when a dead chunk re-runs it alone (a known hang's: the short limit)."""
        ...


def as_chunk(chunk: Chunk | Sequence[Any]) -> Chunk:
    """A Chunk from a Chunk or a plain `(cases, many)` tuple."""
    return chunk if isinstance(chunk, Chunk) else Chunk(*chunk)


def refined(plan: Plan | None, chunk: Chunk | Sequence[Any]) -> list[Chunk]:
    chunk = as_chunk(chunk)
    return [chunk] if plan is None else plan.refine(chunk)


class Executor(abc.ABC):
    """Where the runner's chunks run: every member the runner calls is declared here, so it never
    probes an executor. `run` and `drain` are each executor's own; the rest have answers for an
    executor with nothing to do there (no workers to start ahead, no fingerprints, nothing to close).
    """

    @abc.abstractmethod
    def run(self, chunks: list[Chunk], on_results: OnResults, plan: Plan | None = None) -> None:
        """Run the chunks, calling `on_results` (from one thread at a time) as outcomes are known;
        `plan` refines each chunk as it is dispatched."""

    @abc.abstractmethod
    def drain(self) -> None:
        """Start no new chunk (called from on_results); chunks already running finish."""

    def prestart(self, count: int | None = None) -> None:  # noqa: B027 - optional, nothing to start
        """Start workers now, while the runner lists the cases (`count`: at most that many)."""

    def fingerprints(self, start: bool = True) -> dict[str, Any] | None:
        """The backend's op fingerprints, when the executor's workers report them; None: the
        runner probes them in a process of its own."""
        return None

    def close(self) -> None:  # noqa: B027 - optional, nothing to release
        """Release what `run` did not use (pre-started workers)."""

    def describe(self) -> dict[str, Any]:
        return {"executor": type(self).__name__}
