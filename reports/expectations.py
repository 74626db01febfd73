"""Known failures and flaky cases: the one expectations system of every tier, keyed by backend.

One checked-in file, reports/data/expectations.yaml (or $HARNESS_EXPECTATIONS, or `--expectations`),
lists rules. Each rule has a `reason` (required: why it is known, e.g. an issue link) and any of
the match keys `backend`, `tier`, `case_id`, `stage`, `model_id` (shell-style globs; a missing key
matches all; `model_id` matches any model the case stands for) and `status` (the failing statuses
expected; default any: fail, error, timeout, oom, crash). A rule naming a backend applies to runs
on that backend only.

`harness compare` judges a run with them (reports.compare: XFAIL, IMPROVED...), the generated
unit-tier pytest suite marks matching cases xfail, and `harness registry expectations update RUN`
rewrites one backend's unit-tier rules from a run (its failing unit cases, with their error as
the reason) while keeping every other rule. reports/data/flaky.yaml holds rules of the same shape.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from contracts.settings import current
from contracts.status import FAILING_VALUES, STATUS_VALUES

FILE_VERSION = 1
HEADER = """\
# Known failures, checked in: the one expectations file of every tier (reports/expectations.py).
# `harness compare` reports a failing case that matches an entry as XFAIL (known) instead of FAIL
# (new failure), and a matching case that now passes as IMPROVED (remove the entry, then
# `harness baseline update RUN`). The unit-tier pytest suite marks matching cases xfail.
#
# Each entry: `reason` (required: why it is known, e.g. an issue link) and any of the match keys
# `backend`, `tier`, `case_id`, `stage`, `model_id` (shell-style globs: * ? [..]; a missing key
# matches all; `model_id` matches any model the case stands for) and `status` (a list of
# contracts.status.Status values; default: any failing status: fail, error, timeout, oom, crash).
# `harness registry expectations update RUNDIR --backend B` rewrites backend B's unit-tier entries
# (one per failing case) from a run and keeps every other entry.
#
# Example:
#   - backend: neuron
#     tier: representative
#     case_id: "*deberta*"
#     stage: compile
#     status: [error]
#     reason: "relative-position gather needs dynamic shapes (issue #123)"
"""
_MATCH_KEYS = ("backend", "tier", "case_id", "stage", "model_id")
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Rule:
    """One expectations / flaky entry: globs over the case key, and why."""

    reason: str
    backend: str = "*"
    tier: str = "*"
    case_id: str = "*"
    stage: str = "*"
    model_id: str = "*"
    status: tuple[str, ...] = ()

    def applies_to(self, backend: str | None) -> bool:
        """A rule naming a backend applies only to runs on it (an unknown backend: only `*` rules)."""
        return self.backend == "*" or (backend is not None and fnmatch.fnmatchcase(backend, self.backend))

    def matches(self, tier: str, case_id: str, stage: str, model_ids: Iterable[str] = ()) -> bool:
        return (
            fnmatch.fnmatchcase(tier, self.tier)
            and fnmatch.fnmatchcase(case_id, self.case_id)
            and fnmatch.fnmatchcase(stage, self.stage)
            and (self.model_id == "*" or any(fnmatch.fnmatchcase(m, self.model_id) for m in model_ids))
        )

    def expects(self, status: str) -> bool:
        """Does this rule expect a stage to end in `status` (one of its statuses, or any failing)?"""
        return status in self.status if self.status else status in FAILING_VALUES

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k) for k in _MATCH_KEYS if getattr(self, k) != "*"}
        if self.status:
            d["status"] = list(self.status)
        d["reason"] = self.reason
        return d


def bundled_path(name: str = "expectations.yaml") -> Path:
    return Path(str(resources.files("reports").joinpath(f"data/{name}")))


def default_path() -> Path:
    """$HARNESS_EXPECTATIONS, else the checked-in reports/data/expectations.yaml."""
    return current().expectations or bundled_path()


def _load_rules(path: str | os.PathLike, key: str) -> list[Rule]:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping with a {key!r} list")
    rules = []
    for i, entry in enumerate(data.get(key) or []):
        if not isinstance(entry, dict) or not entry.get("reason"):
            raise ValueError(f"{path}: {key}[{i}] needs a 'reason' (why it is known)")
        status = entry.get("status") or ()
        status = (status,) if isinstance(status, str) else tuple(str(s) for s in status)
        bad = [s for s in status if s not in STATUS_VALUES]
        if bad:
            raise ValueError(f"{path}: {key}[{i}] has unknown status {bad}")
        rules.append(
            Rule(
                reason=str(entry["reason"]),
                status=status,
                **{k: str(entry[k]) for k in _MATCH_KEYS if k in entry},
            )
        )
    return rules


def load_expectations(path: str | os.PathLike | None = None) -> list[Rule]:
    return _load_rules(path or default_path(), "expectations")


def load_flaky(path: str | os.PathLike | None = None) -> list[Rule]:
    return _load_rules(path or bundled_path("flaky.yaml"), "flaky")


def for_backend(rules: Iterable[Rule], backend: str | None) -> list[Rule]:
    return [r for r in rules if r.applies_to(backend)]


class Index:
    """Rules of one backend, looked up by case: exact case ids through a dict (a generated file
    lists thousands), globs in order."""

    def __init__(self, rules: Iterable[Rule], backend: str | None) -> None:
        self.exact: dict[str, list[Rule]] = {}
        self.globbed: list[Rule] = []
        for r in for_backend(rules, backend):
            if _GLOB.search(r.case_id):
                self.globbed.append(r)
            else:
                self.exact.setdefault(r.case_id, []).append(r)

    def matching(self, tier: str, case_id: str, stage: str, model_ids: Iterable[str] = ()) -> list[Rule]:
        model_ids = list(model_ids)
        return [
            r
            for r in (*self.exact.get(case_id, ()), *self.globbed)
            if r.matches(tier, case_id, stage, model_ids)
        ]


def save(rules: Iterable[Rule], path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"version": FILE_VERSION, "expectations": [r.to_dict() for r in rules]}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(
        HEADER + yaml.safe_dump(body, sort_keys=False, width=120, allow_unicode=True), encoding="utf-8"
    )
    os.replace(tmp, path)
    return path


def _tier_rows(rundir: str | os.PathLike, tier: str) -> list[dict[str, Any]]:
    from reports.tables import read_results

    results = read_results(rundir)
    rows = results[results["tier"] == tier].to_dict("records")
    for r in rows:
        ids = r.get("model_ids")
        r["model_ids"] = [] if ids is None or isinstance(ids, float) else [str(m) for m in ids]
    return rows


def _reason(row: dict[str, Any]) -> str:
    parts = [row.get("error_class") or "", row.get("message") or row.get("reason") or ""]
    text = ": ".join(str(p) for p in parts if p and p == p) or str(row.get("status"))
    return text[:300]


def update_from_run(
    rundir: str | os.PathLike, backend: str, path: str | os.PathLike | None = None, tier: str = "unit"
) -> dict[str, Any]:
    """Rewrite `backend`'s per-case rules of `tier` from a run: its failing cases become the expected
    failures (status seen, error as the reason). Every other rule is kept as it is."""
    path = Path(path) if path else default_path()
    old = _load_rules(path, "expectations") if path.is_file() else []
    own = [r for r in old if r.backend == backend and r.tier == tier and not _GLOB.search(r.case_id)]
    kept = [r for r in old if r not in own]
    new = {}
    for row in _tier_rows(rundir, tier):
        if str(row["status"]) in FAILING_VALUES:
            new[(row["case_id"], row["stage"])] = Rule(
                reason=_reason(row),
                backend=backend,
                tier=tier,
                case_id=str(row["case_id"]),
                stage=str(row["stage"]),
                status=(str(row["status"]),),
            )
    save(kept + [new[k] for k in sorted(new)], path)
    before, after = {r.case_id for r in own}, {k[0] for k in new}
    return {
        "path": str(path),
        "backend": backend,
        "tier": tier,
        "expected_failures": len(new),
        "added": sorted(after - before),
        "removed": sorted(before - after),
    }


def check_run(
    rundir: str | os.PathLike, backend: str, path: str | os.PathLike | None = None, tier: str = "unit"
) -> dict[str, Any]:
    """Judge every `tier` row of a run against the expectations alone (no baseline), in the
    comparison vocabulary (contracts.status.Verdict): PASS, FAIL (not expected), XFAIL, IMPROVED."""
    from reports.verdicts import verdict_of

    index = Index(load_expectations(path), backend)
    labels: dict[str, int] = {}
    new_failures, improved = [], []
    for row in _tier_rows(rundir, tier):
        key = (str(row["tier"]), str(row["case_id"]), str(row["stage"]))
        verdict, _ = verdict_of(str(row["status"]), None, index.matching(*key, row["model_ids"]), None)
        labels[verdict.value] = labels.get(verdict.value, 0) + 1
        if verdict.value == "FAIL":
            new_failures.append(key[1])
        elif verdict.value == "IMPROVED":
            improved.append(key[1])
    return {
        "labels": dict(sorted(labels.items())),
        "new_failures": sorted(new_failures),
        "improved": sorted(improved),
    }
