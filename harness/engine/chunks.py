"""How the runner cuts a tier's cases into the chunks it sends to workers."""

from __future__ import annotations

from contracts.records import Case


def chunk_cases(cases: list[Case], size: int) -> list[list[Case]]:
    """`cases` in execution order, cut into chunks that ramp up: 1, 2, 4, ... cases, then `size`.

    Why: a chunk's outcomes land together, so with full chunks the first result (and a fail-fast
    stop) waits for a whole chunk even when the likely failure runs first; the ramp lands the first
    case alone, and costs only log2(size) extra round trips. The cases and their order are unchanged."""
    chunks, i, n = [], 0, 1
    while i < len(cases):
        step = min(n, max(1, size))
        chunks.append(cases[i : i + step])
        i, n = i + step, n * 2
    return chunks
