"""The upstream tier's skip list per backend: a checked-in data file, rewritten from a run.

``registry/data/upstream_skips/<backend>.yaml`` says, like the skip lists torch-xla or Intel's XPU
ops keep for op_db, what the backend does not run natively and why:

    skips:              per OpInfo and dtype, the samples the backend skipped, by reason
                        (backend-unsupported, no-native-lowering) with the ops that fell back
    expected_failures:  per case id, the stage, status and error of a known failure

`update_from_run(RUNDIR)` rewrites it from a run's results.parquet (the upstream rows) and says
what changed; `check_run(RUNDIR)` labels a run against it like the unit tier's expectations:
PASS, XFAIL (a listed failure), FAIL (a failure not listed: a regression), IMPROVED (listed,
now passing: update the file), and the (op, dtype) groups whose skip counts changed.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

SCHEMA_VERSION = 1
FAILING = {"fail", "error", "timeout", "oom", "crash"}
BACKEND_REASONS = ("backend-unsupported", "no-native-lowering")
HEADER = """\
# The upstream tier's skip list for backend {backend!r} (op_db samples; registry/upstream/skiplist.py).
# skips: per OpInfo (name or name.variant) and dtype, how many samples x stages the backend skipped,
#   by reason, and the ops that fell back. expected_failures: known failing cases with why.
# Rewritten from a run's results by
#   harness registry upstream-skips update RUNDIR --backend {backend}
# Do not edit by hand: fix the backend, run the tier, rewrite the file.
"""


@dataclass
class SkipList:
    backend: str
    skips: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # op -> dtype -> entry
    expected_failures: dict[str, dict[str, Any]] = field(default_factory=dict)  # "case_id|stage" -> entry
    source: dict[str, Any] = field(default_factory=dict)


def default_path(backend: str) -> Path:
    from contracts.settings import current

    explicit = current().upstream_skips
    if explicit:
        return explicit
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in backend)
    return Path(str(resources.files("registry").joinpath(f"data/upstream_skips/{safe}.yaml")))


def load(path: str | os.PathLike | None = None, backend: str = "neuron") -> SkipList:
    path = Path(path) if path else default_path(backend)
    if not path.is_file():
        return SkipList(backend)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or int(data.get("schema_version", -1)) != SCHEMA_VERSION:
        raise ValueError(f"{path}: not an upstream skip list of schema version {SCHEMA_VERSION}")
    for key, entry in (data.get("expected_failures") or {}).items():
        if not isinstance(entry, dict) or not entry.get("reason"):
            raise ValueError(f"{path}: expected failure {key!r} needs a reason")
    return SkipList(
        str(data.get("backend", backend)),
        dict(data.get("skips") or {}),
        dict(data.get("expected_failures") or {}),
        dict(data.get("source") or {}),
    )


def save(skips: SkipList, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "schema_version": SCHEMA_VERSION,
        "backend": skips.backend,
        "source": skips.source,
        "skips": {op: dict(sorted(d.items())) for op, d in sorted(skips.skips.items())},
        "expected_failures": dict(sorted(skips.expected_failures.items())),
    }
    text = HEADER.format(backend=skips.backend) + yaml.safe_dump(
        body, sort_keys=False, width=120, allow_unicode=True
    )
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


_COLUMNS = [
    "tier",
    "case_id",
    "stage",
    "status",
    "reason",
    "error_class",
    "message",
    "fallback_ops",
    "op",
    "variant",
    "dtype",
]


def _rows(rundir: str | os.PathLike) -> list[dict[str, Any]]:
    """The upstream rows of a run dir's results.parquet (or of a nightly dir's upstream/ subdir)."""
    import pyarrow.parquet as pq

    rundir = Path(rundir)
    path = next(
        (p for p in (rundir / "results.parquet", rundir / "upstream" / "results.parquet") if p.is_file()),
        None,
    )
    if path is None:
        raise FileNotFoundError(f"{rundir}: no results.parquet here or in {rundir / 'upstream'}")
    rows = [r for r in pq.read_table(path, columns=_COLUMNS).to_pylist() if r["tier"] == "upstream"]
    if not rows:
        raise ValueError(
            f"{rundir}: no upstream-tier results (run `harness run --tier upstream --out {rundir}`)"
        )
    return rows


def _op(row: dict[str, Any]) -> str:
    return f"{row['op']}.{row['variant']}" if row.get("variant") else str(row["op"])


def _why(row: dict[str, Any]) -> str:
    parts = [row.get("error_class") or "", row.get("reason") or "", row.get("message") or ""]
    return ": ".join(p for p in parts if isinstance(p, str) and p)[:300] or str(row["status"])


def from_rows(rows: list[dict[str, Any]], backend: str, source: dict[str, Any] | None = None) -> SkipList:
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    ops: dict[tuple[str, str], set[str]] = defaultdict(set)
    samples: Counter[tuple[str, str]] = Counter()
    failures: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = (_op(r), str(r["dtype"]))
        samples[key] += 1
        if r["status"] == "skipped" and r.get("reason") in BACKEND_REASONS:
            counts[key][r["reason"]] += 1
            ops[key].update(
                str(o) for o in (r.get("fallback_ops") if r.get("fallback_ops") is not None else [])
            )
        elif r["status"] in FAILING:
            failures[f"{r['case_id']}|{r['stage']}"] = {"status": str(r["status"]), "reason": _why(r)}
    skips: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (op, dtype), c in counts.items():
        entry: dict[str, Any] = {reason: int(c[reason]) for reason in BACKEND_REASONS if c[reason]}
        entry["of"] = int(samples[(op, dtype)])
        if ops[(op, dtype)]:
            entry["fallback_ops"] = sorted(ops[(op, dtype)])
        skips[op][dtype] = entry
    return SkipList(backend, dict(skips), failures, dict(source or {}))


def update_from_run(
    rundir: str | os.PathLike, backend: str = "neuron", path: str | os.PathLike | None = None
) -> dict[str, Any]:
    """Rewrite the skip list from a run; returns what changed.

    Only the OpInfos the run covered are rewritten: a run of some ops (`--ops`, a shard) leaves
    the entries of every other op as they were, so it never erases what it did not look at."""
    path = Path(path) if path else default_path(backend)
    old = load(path, backend) if path.is_file() else SkipList(backend)
    rows = _rows(rundir)
    fresh = from_rows(rows, backend)
    covered_ops = {_op(r) for r in rows}
    covered_cases = {str(r["case_id"]).split("/")[0] for r in rows}
    skips = {op: d for op, d in old.skips.items() if op not in covered_ops} | fresh.skips
    failures = {k: v for k, v in old.expected_failures.items() if k.split("/")[0] not in covered_cases}
    failures |= fresh.expected_failures
    source: dict[str, Any] = {"run": Path(rundir).name, "results": len(rows), "ops": len(covered_ops)}
    if set(old.skips) - covered_ops and old.source:  # entries of an earlier run are kept: say which
        source["earlier"] = {k: v for k, v in old.source.items() if k != "earlier"}
    new = SkipList(backend, skips, failures, source)
    save(new, path)
    old_groups = {(op, d) for op, ds in old.skips.items() for d in ds}
    new_groups = {(op, d) for op, ds in new.skips.items() for d in ds}
    return {
        "path": str(path),
        "skipped_groups": len(new_groups),
        "expected_failures": len(new.expected_failures),
        "ops_rewritten": len(covered_ops),
        "groups_added": sorted(f"{o}/{d}" for o, d in new_groups - old_groups),
        "groups_removed": sorted(f"{o}/{d}" for o, d in old_groups - new_groups),
        "failures_added": sorted(set(new.expected_failures) - set(old.expected_failures)),
        "failures_removed": sorted(set(old.expected_failures) - set(new.expected_failures)),
    }


def label(case_id: str, stage: str, status: str, skips: SkipList) -> str:
    expected = f"{case_id}|{stage}" in skips.expected_failures
    if status == "pass":
        return "IMPROVED" if expected else "PASS"
    if status in FAILING:
        return "XFAIL" if expected else "FAIL"
    return "SKIPPED"


def check_run(
    rundir: str | os.PathLike,
    backend: str = "neuron",
    path: str | os.PathLike | None = None,
    limit: int = 200,
) -> dict[str, Any]:
    """Label every upstream case-stage of a run against the skip list."""
    skips = load(path, backend)
    rows = _rows(rundir)
    labels: Counter[str] = Counter()
    listed: dict[str, list[str]] = {"FAIL": [], "IMPROVED": []}
    for r in rows:
        lab = label(str(r["case_id"]), str(r["stage"]), str(r["status"]), skips)
        labels[lab] += 1
        if lab in listed:
            listed[lab].append(f"{r['case_id']}|{r['stage']}")
    now = from_rows(rows, backend)
    ran = {
        (_op(r), str(r["dtype"])) for r in rows
    }  # a subset or a shard says nothing of the groups it did not run
    changed = []
    for op in sorted(set(skips.skips) | set(now.skips)):
        for dtype in sorted(set(skips.skips.get(op, {})) | set(now.skips.get(op, {}))):
            if (op, dtype) not in ran:
                continue
            was, is_ = skips.skips.get(op, {}).get(dtype, {}), now.skips.get(op, {}).get(dtype, {})
            if any(int(was.get(r, 0)) != int(is_.get(r, 0)) for r in BACKEND_REASONS):
                changed.append(
                    {
                        "op": op,
                        "dtype": dtype,
                        **{f"{r}_listed": int(was.get(r, 0)) for r in BACKEND_REASONS},
                        **{f"{r}_now": int(is_.get(r, 0)) for r in BACKEND_REASONS},
                    }
                )
    return {
        "labels": dict(sorted(labels.items())),
        "new_failures": sorted(listed["FAIL"])[:limit],
        "new_failures_total": len(listed["FAIL"]),
        "improved": sorted(listed["IMPROVED"])[:limit],
        "improved_total": len(listed["IMPROVED"]),
        "skips_changed": changed[:limit],
        "skips_changed_total": len(changed),
    }
