"""The upstream tier in a worker process: set up once, then run chunks of cases.

    execute_many([(case.case_id, case.payload) for case in chunk], "neuron") -> [CaseOutcome, ...]

Each outcome is a CaseOutcome (stages, fallback events, and the labels that become the
``op``, ``dtype``, ``variant`` and ``sample`` columns of results.parquet). A chunk arrives grouped
by (op, dtype), so each sample list is generated once per worker (registry.upstream.execute).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from typing import Any

from contracts.backends import fallback_count, fallback_ops
from contracts.records import CaseOutcome, StageResult
from contracts.status import Status
from registry.upstream import execute

STAGES = execute.STAGES


@functools.lru_cache(maxsize=4)
def context(backend: str) -> execute.Context:
    from contracts.backends import get_backend
    from registry.upstream import opinfos

    execute.quiet()
    opinfos.op_db()  # import op_db once per worker, not in the first case's time
    adapter = get_backend(backend)
    return execute.Context(adapter, adapter.precision_mode())


def labels(payload: dict[str, Any]) -> dict[str, Any]:
    info = payload.get("info") or {}
    return {k: info.get(k) for k in ("op", "variant", "dtype", "sample", "family")}


def _outcome(
    case_id: str,
    payload: dict[str, Any],
    rows: list[StageResult],
    events: list[dict[str, Any]],
    seconds: float,
    reported: bool = True,
) -> CaseOutcome:
    """One case's outcome; `reported`: the backend reports fallbacks (else the count is null)."""
    return CaseOutcome(
        case_id=case_id,
        tier="upstream",
        stages=[r.to_dict() for r in rows],
        fallback_count=fallback_count(events) if reported else None,
        fallback_ops=fallback_ops(events),
        fallback_events=events,
        seconds=seconds,
        info=labels(payload),
    )


def _listing_failure(payload: dict[str, Any]) -> list[StageResult] | None:
    """Rows of a group whose listing crashed or hung: the death is the finding, not re-run here."""
    listed = payload.get("listing") or {}
    if listed.get("status") in (Status.CRASH.value, Status.TIMEOUT.value):
        return [
            StageResult(
                "forward",
                Status(listed["status"]),
                reason=listed.get("reason") or "sample generation died",
                message=listed.get("message", ""),
            ),
            StageResult("backward", Status.NOT_ATTEMPTED, reason="sample generation died"),
        ]
    return None


def execute_many(items: Iterable[tuple[str, dict[str, Any]]], backend: str) -> list[CaseOutcome]:
    """(case_id, payload) pairs -> outcomes, one each, in order; never raises for a case."""
    items = list(items)
    try:
        ctx = context(backend)
    except Exception as exc:  # noqa: BLE001 - a backend that cannot load: every case says so
        msg = str(exc).splitlines()[0][:300] if str(exc) else ""
        rows = [
            StageResult(
                s,
                Status.NOT_ATTEMPTED,
                reason=f"backend {backend!r} failed to load",
                error_class=type(exc).__name__,
                message=msg,
            )
            for s in STAGES
        ]
        return [_outcome(cid, p, rows, [], 0.0) for cid, p in items]
    out = []
    for cid, payload in items:
        t0 = time.perf_counter()
        rows = _listing_failure(payload)
        events: list[dict[str, Any]] = []
        if rows is None:
            try:
                rows, events = execute.run_case(payload, ctx)
            except Exception as exc:  # noqa: BLE001 - last line of defence: one outcome per case
                rows = [
                    StageResult(
                        "forward",
                        Status.ERROR,
                        reason="harness error while running the sample",
                        error_class=type(exc).__name__,
                        message=execute._short(exc),
                    ),
                    StageResult(
                        "backward", Status.NOT_ATTEMPTED, reason="harness error in the forward stage"
                    ),
                ]
        for r in rows:  # each stage counts its own fallbacks (0 when it did not run on the device)
            r.metrics.setdefault("fallback_count", 0 if ctx.adapter.reports_fallbacks else None)
            r.metrics.setdefault("fallback_ops", [])
        out.append(
            _outcome(
                cid,
                payload,
                rows,
                [_event(e) for e in events],
                time.perf_counter() - t0,
                ctx.adapter.reports_fallbacks,
            )
        )
    return out


def _event(e: dict[str, Any]) -> dict[str, Any]:
    return {k: e.get(k) for k in ("op", "input_shapes", "input_dtypes", "reason", "frame", "count")}
