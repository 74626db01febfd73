"""Known failures and flaky cases: the one expectations system of every tier, keyed by backend.

One checked-in file, reports/data/expectations.yaml (or $HARNESS_EXPECTATIONS, or `--expectations`),
lists rules. Each rule has a `reason` (required: why it is known, e.g. an issue link) and any of
the match keys `backend`, `tier`, `case_id`, `stage`, `model_id` (shell-style globs; a missing key
matches all; `model_id` matches any model the case stands for) and `status` (the failing statuses
expected; default any: fail, error, timeout, oom, crash). A rule naming a backend applies to runs
on that backend only. A file is loaded into typed models (`ExpectationsFile`, `FlakyFile`): an
unknown key is a RuleFileError naming the file, the entry and the key.

`harness compare` judges a run with them (reports.compare: XFAIL, IMPROVED...), the generated
unit-tier pytest suite marks matching cases xfail, and `harness registry expectations update RUN`
rewrites one backend's unit-tier rules from a run (its failing unit cases, with their error as
the reason) while keeping every other rule. reports/data/flaky.yaml holds rules of the same shape.
The upstream tier's known failures are rules of this system too, kept beside its skip counts
(reports.upstream_skips); `rewrite` and `judge` are the one implementation both files are updated
and checked with.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, Field, field_validator

from contracts.rulefiles import Rules, load_rules, resource
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
#     reason: "relative-position gather needs dynamic shapes (https://tracker.example/BACKEND-123)"
"""
_MATCH_KEYS = ("backend", "tier", "case_id", "stage", "model_id")
_GLOB = re.compile(r"[*?\[]")


class Rule(Rules):
    """One expectations / flaky entry: globs over the case key, and why."""

    model_config = ConfigDict(coerce_numbers_to_str=True)

    reason: str = Field(min_length=1)  # why it is known: an entry without one is refused
    backend: str = "*"
    tier: str = "*"
    case_id: str = "*"
    stage: str = "*"
    model_id: str = "*"
    status: tuple[str, ...] = ()

    def __init__(self, reason: str | None = None, /, **data: Any) -> None:
        super().__init__(**({"reason": reason} if reason is not None else {}), **data)

    @field_validator("status", mode="before")
    @classmethod
    def _statuses(cls, value: Any) -> Any:
        value = (value,) if isinstance(value, str) else tuple(value or ())
        bad = [s for s in value if s not in STATUS_VALUES]
        if bad:
            raise ValueError(f"unknown status {bad} (one of {', '.join(STATUS_VALUES)})")
        return value

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


class ExpectationsFile(Rules):
    """reports/data/expectations.yaml (or a user's file of the same shape)."""

    version: int = FILE_VERSION
    expectations: tuple[Rule, ...] = ()


class FlakyFile(Rules):
    """reports/data/flaky.yaml."""

    version: int = FILE_VERSION
    flaky: tuple[Rule, ...] = ()


def bundled_path(name: str = "expectations.yaml") -> Path:
    return resource("reports", f"data/{name}")


def default_path() -> Path:
    """$HARNESS_EXPECTATIONS, else the checked-in reports/data/expectations.yaml."""
    return current().expectations or bundled_path()


def load_expectations(path: str | os.PathLike | None = None) -> list[Rule]:
    """The rules of an expectations file (RuleFileError when it is unreadable or has an unknown key)."""
    return list(load_rules(ExpectationsFile, path or default_path()).expectations)


def load_flaky(path: str | os.PathLike | None = None) -> list[Rule]:
    return list(load_rules(FlakyFile, path or bundled_path("flaky.yaml")).flaky)


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


def dump(rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """Rules as a file lists them (keys that match everything left out)."""
    return [r.to_dict() for r in rules]


def write_yaml(path: str | os.PathLike, header: str, body: dict[str, Any]) -> Path:
    """A rule file written atomically: its header comment, then the body."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(
        header + yaml.safe_dump(body, sort_keys=False, width=120, allow_unicode=True), encoding="utf-8"
    )
    os.replace(tmp, path)
    return path


def save(rules: Iterable[Rule], path: str | os.PathLike) -> Path:
    return write_yaml(path, HEADER, {"version": FILE_VERSION, "expectations": dump(rules)})


# ------------------------------------------------------------------------ a run against the rules


def tier_rows(rundir: str | os.PathLike, tier: str) -> list[dict[str, Any]]:
    """The `tier` rows of a run's results (a run dir, or a nightly dir with one subdirectory per
    tier), nulls as None and `model_ids` as a list."""
    from reports.tables import read_results

    results = read_results(rundir)
    frame = results[results["tier"] == tier].astype(object)
    rows = frame.where(frame.notna(), None).to_dict("records")
    for r in rows:
        ids = r.get("model_ids")
        r["model_ids"] = [] if ids is None or isinstance(ids, float) else [str(m) for m in ids]
    return rows


def failure_reason(row: dict[str, Any]) -> str:
    """Why a failing row failed, as a rule written from it says: its error, else its reason."""
    parts = [row.get("error_class") or "", row.get("message") or row.get("reason") or ""]
    text = ": ".join(str(p) for p in parts if p) or str(row.get("status"))
    return text[:300]


def rewrite(
    rules: list[Rule],
    rows: list[dict[str, Any]],
    backend: str,
    tier: str,
    covers: Callable[[str], str] | None = None,
) -> tuple[list[Rule], list[Rule], list[Rule]]:
    """`backend`'s per-case rules of `tier` rewritten from a run's `rows` of that tier: each failing
    row becomes a rule (its status, its error as the reason). Returns (all rules, the replaced ones,
    the new ones); every other rule is kept as it is.

    `covers` maps a case id to the unit a run covers (the upstream tier: its OpInfo): only rules of
    units the run has rows of are replaced, so a run of a subset never erases what it did not look
    at. None: the run stands for the whole tier."""
    covered = None if covers is None else {covers(str(r["case_id"])) for r in rows}
    own = [
        r
        for r in rules
        if r.backend == backend
        and r.tier == tier
        and not _GLOB.search(r.case_id)
        and (covered is None or covers(r.case_id) in covered)
    ]
    new: dict[tuple[str, str], Rule] = {}
    for row in rows:
        if str(row["status"]) in FAILING_VALUES:
            new[(str(row["case_id"]), str(row["stage"]))] = Rule(
                failure_reason(row),
                backend=backend,
                tier=tier,
                case_id=str(row["case_id"]),
                stage=str(row["stage"]),
                status=(str(row["status"]),),
            )
    fresh = [new[k] for k in sorted(new)]
    return [r for r in rules if r not in own] + fresh, own, fresh


def judge(rows: Iterable[dict[str, Any]], rules: Iterable[Rule], backend: str | None) -> dict[str, Any]:
    """Every row against the rules alone (no baseline), in the comparison vocabulary
    (contracts.status.Verdict, reports.verdicts.verdict_of): label counts, and the (case id, stage)
    of the new failures (FAIL: failing, no rule expects it) and the improvements (IMPROVED: a rule
    expects a failure, it passes)."""
    from reports.verdicts import verdict_of

    index = Index(rules, backend)
    labels: Counter[str] = Counter()
    listed: dict[str, list[tuple[str, str]]] = {"FAIL": [], "IMPROVED": []}
    for row in rows:
        key = (str(row["tier"]), str(row["case_id"]), str(row["stage"]))
        verdict, _ = verdict_of(
            str(row["status"]), None, index.matching(*key, row.get("model_ids") or ()), None
        )
        labels[verdict.value] += 1
        if verdict.value in listed:
            listed[verdict.value].append(key[1:])
    return {
        "labels": dict(sorted(labels.items())),
        "new_failures": sorted(listed["FAIL"]),
        "improved": sorted(listed["IMPROVED"]),
    }


def update_from_run(
    rundir: str | os.PathLike, backend: str, path: str | os.PathLike | None = None, tier: str = "unit"
) -> dict[str, Any]:
    """Rewrite `backend`'s per-case rules of `tier` from a run: its failing cases become the expected
    failures (status seen, error as the reason). Every other rule is kept as it is."""
    path = Path(path) if path else default_path()
    old = load_expectations(path) if path.is_file() else []
    rules, own, new = rewrite(old, tier_rows(rundir, tier), backend, tier)
    save(rules, path)
    before, after = {r.case_id for r in own}, {r.case_id for r in new}
    return {
        "path": str(path),
        "backend": backend,
        "tier": tier,
        "expected_failures": len({(r.case_id, r.stage) for r in new}),
        "added": sorted(after - before),
        "removed": sorted(before - after),
    }


def check_run(
    rundir: str | os.PathLike, backend: str, path: str | os.PathLike | None = None, tier: str = "unit"
) -> dict[str, Any]:
    """Judge every `tier` row of a run against the expectations alone (no baseline), in the
    comparison vocabulary (contracts.status.Verdict): PASS, FAIL (not expected), XFAIL, IMPROVED."""
    judged = judge(tier_rows(rundir, tier), load_expectations(path), backend)
    return {
        "labels": judged["labels"],
        "new_failures": sorted(case for case, _ in judged["new_failures"]),
        "improved": sorted(case for case, _ in judged["improved"]),
    }
