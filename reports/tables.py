"""Write and read a run's four Parquet tables (see reports.schema), atomically.

The runner calls, once per run (and again after a restart: the files are rewritten whole)::

    from reports.tables import write_run_tables, read_results
    write_run_tables(run_dir, run_meta, rows, fallback_events)
    df = read_results(run_dir)        # pandas.DataFrame, one row per case and stage

`rows` are contracts.records.ResultRow (the runner's, from contracts.rows.case_rows) or dicts keyed
by the same column names, normalized by contracts.rows.result_row: ``traits``, ``metrics`` and
unknown keys may be dicts (stored as JSON strings; unknown keys go to ``extra``); ``model_ids``
defaults to ``[model_id]``; ``graphs``/``recompiles`` default to the same keys in ``metrics``; a
dict's ``native_op_calls`` ({op: calls}) feeds ``per_op.native_calls`` and its
``fallback_events`` are attributed to its case. Fallback event dicts carry ``model_id, op,
input_shapes, input_dtypes, reason, frame, model_frame, count`` and, best, ``tier`` and
``case_id``; without them the case is found through ``model_id``. Each file is written to a
temporary file and renamed into place.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from contracts.records import ResultRow
from contracts.rows import opt_float, opt_int, result_row, to_json
from contracts.status import FAILING_VALUES, Status
from reports.errors import SchemaVersionError
from reports.schema import (
    FALLBACKS,
    META_SCHEMA_VERSION,
    PER_OP,
    RESULTS,
    RUNS,
    SCHEMA_VERSION,
    TABLES,
    Table,
    column_names,
)

_RESULT_COLUMNS = tuple(column_names(RESULTS))


# ---------------------------------------------------------------------------------------- writing


def write_run_tables(
    run_dir: str | os.PathLike,
    run_meta: dict[str, Any],
    rows: Iterable[ResultRow | Mapping[str, Any]],
    fallback_events: list[dict[str, Any]] | None = None,
    native_op_calls: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, Path]:
    """Write runs, results, fallbacks and per_op Parquet files into run_dir; return their paths.

    `rows` are ResultRows (contracts.rows.case_rows makes them from a CaseOutcome) or row dicts
    (normalized by contracts.rows.result_row; a dict may carry `fallback_events` and
    `native_op_calls` of its case). `native_op_calls` maps (tier, op) to calls run on the device."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = list(rows)
    run_id = str(
        run_meta.get("run_id") or next((_get(r, "run_id") for r in rows if _get(r, "run_id")), run_dir.name)
    )
    json_cache: dict[int, str | None] = {}  # the stage rows of a case share one traits dict: encode it once
    events = list(fallback_events or [])
    native: dict[tuple[str, str], int] = defaultdict(int, native_op_calls or {})
    results = []
    for raw in rows:
        if isinstance(raw, ResultRow):
            row = raw if raw.run_id else replace(raw, run_id=run_id)
        else:
            row = result_row(raw, run_id, json_cache)
            for ev in raw.get("fallback_events") or []:
                events.append({"tier": row.tier, "case_id": row.case_id, "model_id": row.model_id, **ev})
            for op, n in (raw.get("native_op_calls") or {}).items():
                native[(row.tier, str(op))] += int(n)
        results.append({c: getattr(row, c) for c in _RESULT_COLUMNS})
    falls = _dedupe([_fallback_row(e, run_id, results) for e in events])
    per_op = _per_op_rows(run_id, results, falls, dict(native))
    run_row = _run_row(run_meta, run_id, results)
    paths = {}
    for table, data in ((FALLBACKS, falls), (PER_OP, per_op), (RUNS, [run_row]), (RESULTS, results)):
        paths[table.name] = _write_atomic(run_dir / f"{table.name}.parquet", table, data)
    return paths


def _get(row: ResultRow | Mapping[str, Any], key: str) -> Any:
    return getattr(row, key) if isinstance(row, ResultRow) else row.get(key)


def _write_atomic(path: Path, table: Table, rows: list[dict[str, Any]]) -> Path:
    schema = table.arrow_schema
    arrays = {c: [r.get(c) for r in rows] for c in schema.names}
    tbl = pa.Table.from_pydict(arrays, schema=schema)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(tbl, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _fallback_row(ev: dict[str, Any], run_id: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    if not ev.get("op"):
        raise ValueError(f"fallback event without an op: {ev!r}")
    tier, case_id, model_id = ev.get("tier"), ev.get("case_id"), ev.get("model_id")
    if not case_id and model_id:
        hit = next((r for r in results if model_id == r["model_id"] or model_id in r["model_ids"]), None)
        if hit:
            tier, case_id = hit["tier"], hit["case_id"]
    return {
        "run_id": run_id,
        "tier": tier,
        "case_id": case_id,
        "model_id": model_id,
        "op": str(ev["op"]),
        "input_shapes": _text(ev.get("input_shapes")),
        "input_dtypes": _text(ev.get("input_dtypes")),
        "reason": _text(ev.get("reason")),
        "count": opt_int(ev.get("count", 1)),
        "frame": _text(ev.get("frame")),
        "model_frame": _text(ev.get("model_frame")),
    }


def _dedupe(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same event reported on several stage rows of one case counts once."""
    seen, out = set(), []
    for r in rows:
        key = tuple(sorted((k, str(v)) for k, v in r.items()))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _per_op_rows(
    run_id: str,
    results: list[dict[str, Any]],
    falls: list[dict[str, Any]],
    native: dict[tuple[str, str], int],
) -> list[dict[str, Any]]:
    cases: dict[tuple[str, str], dict[str, Any]] = {}
    blocked: dict[tuple[str, str], set[str]] = defaultdict(set)  # (tier, op) -> case ids
    fell: dict[tuple[str, str], int] = defaultdict(int)
    for r in results:
        cases.setdefault((r["tier"], r["case_id"]), r)
        for op in r["fallback_ops"]:
            blocked[(r["tier"], op)].add(r["case_id"])
    for f in falls:
        if f["tier"] is None:
            continue
        fell[(f["tier"], f["op"])] += f["count"] or 0
        if f["case_id"]:
            blocked[(f["tier"], f["op"])].add(f["case_id"])
    native_tiers = {tier for tier, _ in native}  # tiers whose runner counted native calls
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for (tier, _), r in cases.items():
        totals[tier][0] += r["n_models"]
        totals[tier][1] += r["weight"] or 0.0
    out = []
    for tier, op in sorted(set(blocked) | set(native) | set(fell)):
        ids = blocked.get((tier, op), set())
        models = sum(cases[(tier, c)]["n_models"] for c in ids if (tier, c) in cases)
        weight = sum(cases[(tier, c)]["weight"] or 0.0 for c in ids if (tier, c) in cases)
        n_total, w_total = totals[tier]
        out.append(
            {
                "run_id": run_id,
                "tier": tier,
                "op": op,
                "native_calls": native.get((tier, op), 0) if tier in native_tiers else None,
                "fallback_calls": fell.get((tier, op), 0),
                "cases_blocked": len(ids),
                "models_blocked": models,
                "models_total": int(n_total),
                "weight_total": float(w_total),
                "download_share_blocked": weight / w_total if w_total else None,
            }
        )
    return out + _opinfo_rows(run_id, results)


def _opinfo_rows(run_id: str, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upstream tier: per (OpInfo, variant, dtype), its samples by how they ran (a sample is failed
    if a stage failed, else fallback if a stage matched only through a CPU fallback, else native
    if a stage passed, else skipped)."""
    verdict: dict[tuple[str, str, str, str, str], str] = {}
    rank = {"skipped": 0, "native": 1, "fallback": 2, "failed": 3}
    for r in results:
        if r.get("op") is None or r.get("dtype") is None:
            continue
        status = r["status"]
        v = (
            "failed"
            if status in FAILING_VALUES
            else "native"
            if status == Status.PASS.value
            else "fallback"
            if r.get("reason") == "no-native-lowering"
            else "skipped"
        )
        key = (r["tier"], str(r["op"]), str(r.get("variant") or ""), str(r["dtype"]), r["case_id"])
        if rank[v] > rank.get(verdict.get(key, "skipped"), 0) or key not in verdict:
            verdict[key] = v
    counts: dict[tuple[str, str, str, str], dict[str, int]] = {}
    for (tier, op, variant, dtype, _), v in verdict.items():
        c = counts.setdefault(
            (tier, op, variant, dtype), {"native": 0, "fallback": 0, "failed": 0, "skipped": 0}
        )
        c[v] += 1
    return [
        {
            "run_id": run_id,
            "tier": tier,
            "op": op,
            "variant": variant,
            "dtype": dtype,
            "cases_native": c["native"],
            "cases_fallback": c["fallback"],
            "cases_failed": c["failed"],
            "cases_skipped": c["skipped"],
            "native_calls": None,
            "fallback_calls": None,
            "cases_blocked": None,
            "models_blocked": None,
            "models_total": None,
            "weight_total": None,
            "download_share_blocked": None,
        }
        for (tier, op, variant, dtype), c in sorted(counts.items())
    ]


def _timestamp(value: Any) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    raise ValueError(f"not a timestamp: {value!r}")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit(path: str | os.PathLike | None = None) -> str | None:
    """The commit of the checkout the harness runs from (no network; None outside git)."""
    where = Path(path) if path else Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _json_text(value: Any) -> str | None:
    """A JSON object column: a dict is encoded, a string kept, nothing is null."""
    if value is None or value == {}:
        return None
    return value if isinstance(value, str) else to_json(value)


def _run_row(meta: dict[str, Any], run_id: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    started, finished = _timestamp(meta.get("started_at")), _timestamp(meta.get("finished_at")) or now
    duration = meta.get("duration_seconds")
    if duration is None and started is not None:
        duration = (finished - started).total_seconds()
    tiers = meta.get("tiers") or sorted({r["tier"] for r in results})
    if isinstance(tiers, str):
        tiers = [tiers]
    known = set(column_names(RUNS)) | {"commit", "tier"}
    extra = {k: v for k, v in meta.items() if k not in known}
    return {
        "run_id": run_id,
        "schema_version": SCHEMA_VERSION,
        "started_at": started,
        "finished_at": finished,
        "duration_seconds": opt_float(duration),
        "git_commit": meta.get("git_commit") or meta.get("commit") or git_commit(),
        "harness_version": meta.get("harness_version") or _version("neuron-coverage-harness"),
        "torch_version": meta.get("torch_version") or _version("torch"),
        "transformers_version": meta.get("transformers_version") or _version("transformers"),
        "backend": meta.get("backend"),
        "lowering_table_version": _text(meta.get("lowering_table_version")),
        "backend_kind": _text(meta.get("backend_kind")),
        "backend_versions": _json_text(meta.get("backend_versions")),
        "backend_settings": _json_text(meta.get("backend_settings")),
        "tiers": [str(t) for t in tiers],
        "shard": _text(meta.get("shard")),
        "host": meta.get("host") or socket.gethostname(),
        "extra": to_json(extra),
    }


# ---------------------------------------------------------------------------------------- reading


def table_dirs(run_dir: str | os.PathLike) -> list[Path]:
    """Directories holding the tables of run_dir: itself, or (a nightly dir) its subdirectories."""
    run_dir = Path(run_dir)
    if (run_dir / "results.parquet").is_file():
        return [run_dir]
    subs = (
        sorted(p for p in run_dir.iterdir() if (p / "results.parquet").is_file()) if run_dir.is_dir() else []
    )
    if not subs:
        raise FileNotFoundError(f"{run_dir}: no results.parquet here or in its subdirectories")
    return subs


def _check_version(path: Path) -> None:
    meta = pq.read_schema(path).metadata or {}
    version = int(meta.get(META_SCHEMA_VERSION, b"0"))
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path}: schema version {version} is newer than this harness reads "
            f"({SCHEMA_VERSION}); upgrade the harness"
        )


def read_table(run_dir: str | os.PathLike, name: str) -> pd.DataFrame:
    """One table of a run (concatenated over a nightly dir's tier subdirectories)."""
    table = TABLES[name]
    frames = []
    for d in table_dirs(run_dir):
        path = d / f"{name}.parquet"
        if not path.is_file():
            continue
        _check_version(path)
        frames.append(pq.read_table(path).to_pandas())
    if not frames:
        return table.arrow_schema.empty_table().to_pandas()
    frames = [f for f in frames if len(f)] or frames[:1]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def read_results(run_dir: str | os.PathLike) -> pd.DataFrame:
    """results.parquet of a run: one row per case and stage."""
    return read_table(run_dir, "results")


def iter_json(values: Iterable[Any]) -> Iterable[dict[str, Any]]:
    """Parse a JSON-string column (traits, metrics, extra) row by row; null -> {}."""
    for v in values:
        yield json.loads(v) if isinstance(v, str) and v else {}
