"""From a case's outcome to its table rows: the one path a result takes into results.parquet.

    StageResult / ModelCheck --(contracts.tiers.from_result)--> CaseOutcome (journaled as JSON)
        --case_rows()--> CaseRows: ResultRow per stage + the case's fallback events and native op calls
        --reports.tables.write_run_tables()--> results / fallbacks / per_op Parquet

`result_row()` is the one normalizer of a row: every ResultRow is made by it (from a CaseOutcome
here, or from a hand-written dict a tool passes to reports.tables). Required columns come from
ResultRow's field metadata; a bad value never loses the row (an unknown status is recorded as
`error` with the bad value in the reason, an unknown blame moves to `extra`, with a warning).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from contracts.records import CaseOutcome, ResultRow
from contracts.rootcause import root_cause_op
from contracts.status import STATUS_VALUES, Blame, Status

_COLUMNS = tuple(f.name for f in fields(ResultRow))
_REQUIRED = tuple(f.name for f in fields(ResultRow) if f.metadata["required"] and f.name != "run_id")
_INT_COLUMNS = ("n_models", "fallback_count", "graphs", "recompiles", "peak_memory_bytes", "sample")
_FLOAT_COLUMNS = ("weight", "seconds")
_TEXT_COLUMNS = ("reason", "error_class", "message", "failing_op", "model_id", "op", "dtype", "blame")
_BLAMES = frozenset(b.value for b in Blame)
#: columns a tier fills per stage (a key of the stage dict) or per case (a key of CaseOutcome.info)
_STAGE_OR_CASE_COLUMNS = ("blame", "blame_evidence", "root_cause", "op", "dtype", "variant", "sample")
#: keys a hand-written row dict may carry that are not columns (reports.tables consumes them)
ROW_SIDE_KEYS = frozenset({"native_op_calls", "fallback_events"})


@dataclass
class CaseRows:
    """A case's rows and what rides beside them: fallback events (attributed to the case) and
    native op calls ({op: calls}, for per_op.native_calls)."""

    rows: list[ResultRow]
    fallback_events: list[dict[str, Any]] = field(default_factory=list)
    native_op_calls: dict[str, int] = field(default_factory=dict)


def to_json(value: Any) -> str | None:
    """A JSON column's text: dicts sorted, {} and None as null, text as is."""
    if value is None or value == {}:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def opt_int(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return int(value)


def opt_float(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if value != value else value


def result_row(
    raw: Mapping[str, Any], run_id: str = "", json_cache: dict[int, str | None] | None = None
) -> ResultRow:
    """A row dict (column names; `traits`, `metrics`, `extra`, `blame_evidence`, `root_cause` may be
    dicts; other keys go to `extra`; `model_ids` defaults to [model_id]; `graphs`/`recompiles` default to the
    same keys of `metrics`) -> a ResultRow. `json_cache` encodes a dict shared by several rows once."""
    missing = [c for c in _REQUIRED if raw.get(c) in (None, "")]
    if missing:
        raise ValueError(f"result row {raw.get('case_id', '?')!r}/{raw.get('stage', '?')!r} lacks {missing}")
    row: dict[str, Any] = {c: raw.get(c) for c in _COLUMNS}
    row["run_id"] = str(raw.get("run_id") or run_id)
    status = getattr(raw["status"], "value", raw["status"])
    if status not in STATUS_VALUES:  # a runner bug must not lose the row: record it as an error with why
        warnings.warn(f"case {raw['case_id']!r}: unknown status {status!r} recorded as error", stacklevel=2)
        row["reason"] = f"invalid status {status!r}" + (f"; {raw['reason']}" if raw.get("reason") else "")
        status = Status.ERROR.value
    row["status"] = status
    for c in ("tier", "case_id", "stage"):
        row[c] = str(raw[c])
    model_ids = raw.get("model_ids")
    if model_ids is None:
        model_ids = [raw["model_id"]] if raw.get("model_id") else []
    row["model_ids"] = [str(m) for m in model_ids]
    row["model_id"] = raw.get("model_id") or (row["model_ids"][0] if row["model_ids"] else None)
    row["n_models"] = len(row["model_ids"])
    metrics = dict(raw.get("metrics") or {}) if isinstance(raw.get("metrics"), dict) else raw.get("metrics")
    for key in ("graphs", "recompiles"):
        if row[key] is None and isinstance(metrics, dict) and key in metrics:
            row[key] = metrics[key]
    for key in _INT_COLUMNS:
        row[key] = opt_int(row[key])
    for key in _FLOAT_COLUMNS:
        row[key] = opt_float(row[key])
    row["fallback_ops"] = sorted({str(o) for o in (raw.get("fallback_ops") or [])})
    extra = {k: v for k, v in raw.items() if k not in row and k not in ROW_SIDE_KEYS}
    if isinstance(raw.get("extra"), dict):
        extra.update(raw["extra"])
    for c in _TEXT_COLUMNS:
        row[c] = None if row[c] in (None, "") else str(getattr(row[c], "value", row[c]))
    row["variant"] = None if row["variant"] is None else str(row["variant"])  # "" is the op itself
    if row["blame"] is not None and row["blame"] not in _BLAMES:  # kept, but not in the blame column
        warnings.warn(f"case {raw['case_id']!r}: unknown blame {row['blame']!r} moved to extra", stacklevel=2)
        extra["invalid_blame"], row["blame"] = row["blame"], None
    traits = raw.get("traits")
    if json_cache is None:
        row["traits"] = to_json(traits)
    else:
        if id(traits) not in json_cache:
            json_cache[id(traits)] = to_json(traits)
        row["traits"] = json_cache[id(traits)]
    row["metrics"], row["extra"] = to_json(metrics), to_json(extra)
    row["blame_evidence"] = to_json(raw.get("blame_evidence"))
    root_cause = raw.get("root_cause")
    if isinstance(root_cause, str):  # a hand-written row may carry the JSON text
        root_cause = json.loads(root_cause) if root_cause else None
    row["root_cause"] = to_json(root_cause)
    row["root_cause_op"] = raw.get("root_cause_op") or root_cause_op(root_cause)
    return ResultRow(**row)


def case_rows(outcome: CaseOutcome, run_id: str, json_cache: dict[int, str | None] | None = None) -> CaseRows:
    """A case's outcome -> one ResultRow per stage.

    Case-level fallback totals go on the `on_device` row (the last row when the tier has none)
    unless a stage reports its own, so summing fallback_count over rows counts each call once.
    Compile counts go on the `compile` row; a stage's `native_op_calls` metric feeds per_op."""
    info = outcome.info or {}
    names = [s["stage"] for s in outcome.stages]
    totals_on = "on_device" if "on_device" in names else (names[-1] if names else None)
    model_id = info.get("model_id") or (outcome.model_ids[0] if outcome.model_ids else None)
    extra = {
        k: info[k] for k in ("model_type", "architecture", "parameters", "signature", "family") if info.get(k)
    }
    extra.update({"case_status": outcome.status, "worker": outcome.worker, "case_seconds": outcome.seconds})
    cache = {} if json_cache is None else json_cache
    rows, native = [], {}
    for st in outcome.stages:
        metrics = dict(st.get("metrics") or {})
        raw = {
            "run_id": run_id,
            "tier": outcome.tier,
            "case_id": outcome.case_id,
            "stage": st["stage"],
            "status": st["status"],
            "reason": st.get("reason"),
            "error_class": st.get("error_class"),
            "message": st.get("message"),
            "failing_op": st.get("failing_op"),
            "seconds": st.get("seconds"),
            "model_id": model_id,
            "model_ids": list(outcome.model_ids),
            "weight": outcome.weight,
            "peak_memory_bytes": outcome.peak_memory_bytes,
            "traits": info.get("traits"),
            "extra": extra,
        }
        for (
            k
        ) in _STAGE_OR_CASE_COLUMNS:  # a stage's own value, else the case's (e.g. an upstream sample's op)
            if k in st or k in info:
                raw[k] = st[k] if k in st else info[k]
        if "fallback_count" in metrics or "fallback_ops" in metrics:
            raw["fallback_count"] = metrics.pop("fallback_count", None)
            raw["fallback_ops"] = list(metrics.pop("fallback_ops", None) or [])
        elif st["stage"] == totals_on:
            raw["fallback_count"], raw["fallback_ops"] = outcome.fallback_count, list(outcome.fallback_ops)
        if st["stage"] == "compile":
            raw["graphs"], raw["recompiles"] = info.get("graphs"), info.get("recompiles")
        for op, n in (metrics.pop("native_op_calls", None) or {}).items():
            native[str(op)] = native.get(str(op), 0) + int(n)
        raw["metrics"] = metrics
        rows.append(result_row(raw, run_id, cache))
    events = [
        {"tier": outcome.tier, "case_id": outcome.case_id, "model_id": model_id, **e}
        for e in outcome.fallback_events
    ]
    return CaseRows(rows, events, native)
