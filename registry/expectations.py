"""Known unit-tier failures per backend, as a checked-in data file (registry/expectations/B.yaml).

A run's result for a case is labelled against it, like PyTorch's CI expectations:

    PASS      passed, not expected to fail
    XFAIL     failed/errored as expected (the file says why)
    FAIL      failed/errored and not expected to: a regression
    IMPROVED  expected to fail but passed: update the file
    SKIPPED   not replayable / not attempted (reason kept in the results)

`update_from_run(RUNDIR)` rewrites the file from a run's results.parquet (the unit tier's failing
cases, with their error as the reason) and says what changed.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import yaml

from contracts.settings import current
from contracts.status import FAILING_VALUES

SCHEMA_VERSION = 1
HEADER = """\
# Known failures of the unit tier (registry cases) on backend {backend!r}: each case id is an
# expected failure (pytest xfail) with the status seen and why. Rewritten from a run's results by
#   harness registry expectations update RUNDIR --backend {backend}
# A case listed here that passes is reported as IMPROVED; remove it by re-running the command.
"""


@dataclass(frozen=True)
class Expectation:
    case_id: str
    status: str
    reason: str


def default_path(backend: str) -> Path:
    return current().expectations or Path(str(resources.files("registry").joinpath(f"expectations/{backend}.yaml")))


def load(path: str | os.PathLike | None = None, backend: str = "neuron") -> dict[str, Expectation]:
    path = Path(path) if path else default_path(backend)
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or int(data.get("schema_version", SCHEMA_VERSION)) != SCHEMA_VERSION:
        raise ValueError(f"{path}: not an expectations file of schema version {SCHEMA_VERSION}")
    out = {}
    for case_id, item in (data.get("expected_failures") or {}).items():
        if not isinstance(item, dict) or "reason" not in item:
            raise ValueError(f"{path}: entry {case_id!r} needs a reason")
        out[case_id] = Expectation(case_id, str(item.get("status", "fail")), str(item["reason"]))
    return out


def save(expectations: Iterable[Expectation], path: str | os.PathLike, backend: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "schema_version": SCHEMA_VERSION,
        "backend": backend,
        "expected_failures": {e.case_id: {"status": e.status, "reason": e.reason}
                              for e in sorted(expectations, key=lambda e: e.case_id)},
    }
    text = HEADER.format(backend=backend) + yaml.safe_dump(body, sort_keys=False, width=120, allow_unicode=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def label(case_id: str, status: str, expectations: dict[str, Expectation]) -> str:
    expected = case_id in expectations
    if status == "pass":
        return "IMPROVED" if expected else "PASS"
    if status in FAILING_VALUES:
        return "XFAIL" if expected else "FAIL"
    return "SKIPPED"


def _unit_rows(rundir: str | os.PathLike) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    path = Path(rundir) / "results.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results.parquet in the run directory")
    table = pq.read_table(path)
    rows = table.to_pylist()
    return [r for r in rows if r.get("tier", "unit") == "unit" and r.get("stage", "op") == "op"]


def _reason(row: dict[str, Any]) -> str:
    parts = [row.get("error_class") or "", row.get("message") or row.get("reason") or ""]
    text = ": ".join(p for p in parts if p) or str(row.get("status"))
    return text[:300]


def check_run(rundir: str | os.PathLike, backend: str = "neuron", path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Label every unit case of a run against the expectations."""
    exp = load(path, backend)
    labels: Counter[str] = Counter()
    by_label: dict[str, list[str]] = {"FAIL": [], "IMPROVED": []}
    for row in _unit_rows(rundir):
        lab = label(row["case_id"], str(row["status"]), exp)
        labels[lab] += 1
        if lab in by_label:
            by_label[lab].append(row["case_id"])
    return {"labels": dict(sorted(labels.items())), "new_failures": sorted(by_label["FAIL"]),
            "improved": sorted(by_label["IMPROVED"])}


def update_from_run(rundir: str | os.PathLike, backend: str = "neuron", path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Rewrite the expectations from a run: its failing unit cases become the expected failures."""
    path = Path(path) if path else default_path(backend)
    old = load(path, backend)
    new = {}
    for row in _unit_rows(rundir):
        if str(row["status"]) in FAILING_VALUES:
            new[row["case_id"]] = Expectation(row["case_id"], str(row["status"]), _reason(row))
    save(new.values(), path, backend)
    return {
        "path": str(path),
        "expected_failures": len(new),
        "added": sorted(set(new) - set(old)),
        "removed": sorted(set(old) - set(new)),
    }
