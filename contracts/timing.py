"""Wall time of named phases inside a worker process: where a case's seconds go.

Why: the nightly's time budget is split by measurement, not by guess (benchmarks/nightly_time.py):
the shares spent shrinking, computing CPU references, and so on. Code marks a phase where it
happens; the worker takes the totals after each case and journals them with its outcome
(`CaseOutcome.worker["phases"]`). Time is exclusive: a phase opened inside another (a reference
re-run that shrinks its config) pauses the outer one, so the phases of a case never overlap.

    from contracts.timing import phase
    with phase("shrink"):
        config = resolve_config(spec)

Phases used: ``shrink`` (config shrinking), ``reference`` (anything computed on the CPU reference
to judge the device: numerics references, blame re-runs, the unit tier's CPU op).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Iterator

_local = threading.local()


def _state() -> tuple[dict[str, float], list[list]]:
    if not hasattr(_local, "totals"):
        _local.totals, _local.stack = defaultdict(float), []
    return _local.totals, _local.stack


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time inside the block to `name` (exclusive of phases nested in it)."""
    totals, stack = _state()
    now = time.perf_counter()
    if stack:  # pause the enclosing phase
        outer = stack[-1]
        totals[outer[0]] += now - outer[1]
    stack.append([name, now])
    try:
        yield
    finally:
        end = time.perf_counter()
        name_, start = stack.pop()
        totals[name_] += end - start
        if stack:
            stack[-1][1] = end  # the enclosing phase resumes


def take() -> dict[str, float]:
    """The totals since the last take (rounded to microseconds), and start again from zero."""
    totals, stack = _state()
    now = time.perf_counter()
    if stack:  # the running phase (the innermost; the outer ones are paused): count up to now
        totals[stack[-1][0]] += now - stack[-1][1]
        stack[-1][1] = now
    out = {k: round(v, 6) for k, v in sorted(totals.items()) if v > 0}
    totals.clear()
    return out
