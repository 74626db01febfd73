"""The upstream tier's skip list per backend: a checked-in data file, rewritten from a run.

``reports/data/upstream_skips/<backend>.yaml`` (or $HARNESS_UPSTREAM_SKIPS) says, like the skip
lists torch-xla or Intel's XPU ops keep for op_db, what the backend does not run natively and why:

    skips:         per OpInfo and dtype, how many samples x stages the backend skipped, by reason
                   (backend-unsupported, no-native-lowering), with the ops that fell back
    expectations:  the tier's known failures: rules of reports.expectations, the format of
                   reports/data/expectations.yaml (backend, tier upstream, case_id, stage, status,
                   reason), rewritten and checked by the same code (`rewrite`, `judge`)

Why the skip counts are not expectations: nothing here is decided before a sample runs. The tier
skips a sample at run time, from what the backend does (it declares the op or dtype unsupported,
or the op fell back to the CPU); this file only records the counts of a run, per (OpInfo, dtype),
so that a later run can say which groups changed. A skip is not a failure and has no verdict to
expect (a skipped row is PASS in the comparison vocabulary, and a `pass -> skipped` against a
baseline is `harness compare`'s coverage-lost FAIL), and the census is compared by counts over a
group, not case by case. The known failures are expectations, and are kept as such.

`update_from_run(RUNDIR)` rewrites the file from a run's upstream rows and says what changed;
`check_run(RUNDIR)` judges a run against it: the expectations' verdicts (PASS, XFAIL, FAIL: a
failure no rule expects, IMPROVED: expected to fail, now passes) and the (op, dtype) groups whose
skip counts changed.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from contracts.errors import RuleFileError
from contracts.rulefiles import Rules, read_data, resource, validate
from contracts.status import UpstreamSkip
from reports.expectations import Rule, dump, judge, rewrite, tier_rows, write_yaml

SCHEMA_VERSION = 2
TIER = "upstream"
#: the skip reasons that are the backend's (the census counts these)
BACKEND_REASONS = (UpstreamSkip.BACKEND_UNSUPPORTED.value, UpstreamSkip.NO_NATIVE_LOWERING.value)
HEADER = """\
# The upstream tier's skip list for backend {backend!r} (op_db samples; reports/upstream_skips.py).
# skips: per OpInfo (name or name.variant) and dtype, how many samples x stages the backend skipped,
#   by reason, and the ops that fell back. expectations: the tier's known failures, rules of
#   reports/expectations.py (the format of reports/data/expectations.yaml).
# Rewritten from a run's results by
#   harness registry upstream-skips update RUNDIR --backend {backend}
# Do not edit by hand: fix the backend, run the tier, rewrite the file.
"""


class SkipCount(Rules):
    """The samples x stages of one (OpInfo, dtype) the backend skipped, by reason, of `of` run."""

    model_config = ConfigDict(populate_by_name=True)

    backend_unsupported: int = Field(default=0, ge=0, alias="backend-unsupported")
    no_native_lowering: int = Field(default=0, ge=0, alias="no-native-lowering")
    of: int = Field(ge=0)
    fallback_ops: tuple[str, ...] = ()

    def count(self, reason: str) -> int:
        return {
            UpstreamSkip.BACKEND_UNSUPPORTED.value: self.backend_unsupported,
            UpstreamSkip.NO_NATIVE_LOWERING.value: self.no_native_lowering,
        }[reason]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {r: self.count(r) for r in BACKEND_REASONS if self.count(r)}
        d["of"] = self.of
        if self.fallback_ops:
            d["fallback_ops"] = list(self.fallback_ops)
        return d


class Source(Rules):
    """The run a skip list was written from (and, when entries of an earlier run are kept, that one)."""

    run: str = ""
    results: int = 0
    ops: int = 0
    earlier: Source | None = None


class SkipList(Rules):
    """reports/data/upstream_skips/<backend>.yaml."""

    schema_version: int = SCHEMA_VERSION
    backend: str
    source: Source = Source()
    skips: dict[str, dict[str, SkipCount]] = Field(default_factory=dict)  # op -> dtype -> count
    expectations: tuple[Rule, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "backend": self.backend,
            "source": self.source.model_dump(exclude_defaults=True),
            "skips": {
                op: {dtype: c.to_dict() for dtype, c in sorted(d.items())}
                for op, d in sorted(self.skips.items())
            },
            "expectations": dump(self.expectations),
        }


def default_path(backend: str) -> Path:
    from contracts.settings import current

    explicit = current().upstream_skips
    if explicit:
        return explicit
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in backend)
    return resource("reports", f"data/upstream_skips/{safe}.yaml")


def load(path: str | os.PathLike | None = None, backend: str = "neuron") -> SkipList:
    """The skip list (an empty one when there is no file); RuleFileError for an unknown key or
    another schema version."""
    path = Path(path) if path else default_path(backend)
    if not path.is_file():
        return SkipList(backend=backend)
    data = read_data(path)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise RuleFileError(
            str(path),
            [
                f"schema version {version}, this harness reads {SCHEMA_VERSION}: rewrite it with "
                f"`harness registry upstream-skips update RUNDIR --backend {backend}`"
            ],
        )
    return validate(SkipList, data, path)


def save(skips: SkipList, path: str | os.PathLike) -> Path:
    return write_yaml(path, HEADER.format(backend=skips.backend), skips.to_dict())


def _rows(rundir: str | os.PathLike) -> list[dict[str, Any]]:
    """The upstream rows of a run dir's results.parquet (or of a nightly dir's tier subdirs)."""
    rows = tier_rows(rundir, TIER)
    if not rows:
        raise ValueError(
            f"{rundir}: no upstream-tier results (run `harness run --tier upstream --out {rundir}`)"
        )
    return rows


def _op(row: dict[str, Any]) -> str:
    return f"{row['op']}.{row['variant']}" if row.get("variant") else str(row["op"])


def opinfo_of(case_id: str) -> str:
    """The OpInfo part of an upstream case id ("nonzero/float32/3-9a1b": "nonzero"): the unit a run
    covers, and so the unit an update rewrites."""
    return case_id.split("/")[0]


def census(rows: list[dict[str, Any]]) -> dict[str, dict[str, SkipCount]]:
    """Per (OpInfo, dtype): the samples x stages skipped for a backend reason, of how many."""
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    ops: dict[tuple[str, str], set[str]] = defaultdict(set)
    samples: Counter[tuple[str, str]] = Counter()
    for r in rows:
        key = (_op(r), str(r["dtype"]))
        samples[key] += 1
        if r["status"] == "skipped" and r.get("reason") in BACKEND_REASONS:
            counts[key][r["reason"]] += 1
            ops[key].update(
                str(o) for o in (r.get("fallback_ops") if r.get("fallback_ops") is not None else [])
            )
    skips: dict[str, dict[str, SkipCount]] = defaultdict(dict)
    for (op, dtype), c in counts.items():
        skips[op][dtype] = SkipCount(
            backend_unsupported=c[UpstreamSkip.BACKEND_UNSUPPORTED.value],
            no_native_lowering=c[UpstreamSkip.NO_NATIVE_LOWERING.value],
            of=samples[(op, dtype)],
            fallback_ops=tuple(sorted(ops[(op, dtype)])),
        )
    return dict(skips)


def from_rows(rows: list[dict[str, Any]], backend: str, source: Source | None = None) -> SkipList:
    """The skip list a run's upstream rows say: its skip counts, its failures as expectations."""
    rows = [{"tier": TIER, **r} for r in rows]
    _, _, failures = rewrite([], rows, backend, TIER)
    return SkipList(backend=backend, source=source or Source(), skips=census(rows), expectations=failures)


def _failure_key(rule: Rule) -> str:
    return f"{rule.case_id}|{rule.stage}"


def update_from_run(
    rundir: str | os.PathLike, backend: str = "neuron", path: str | os.PathLike | None = None
) -> dict[str, Any]:
    """Rewrite the skip list from a run; returns what changed.

    Only the OpInfos the run covered are rewritten: a run of some ops (`--ops`, a shard) leaves
    the entries of every other op as they were, so it never erases what it did not look at."""
    path = Path(path) if path else default_path(backend)
    old = load(path, backend)
    rows = _rows(rundir)
    covered_ops = {_op(r) for r in rows}
    skips = {op: d for op, d in old.skips.items() if op not in covered_ops} | census(rows)
    rules, _, _ = rewrite(list(old.expectations), rows, backend, TIER, covers=opinfo_of)
    source = Source(run=Path(rundir).name, results=len(rows), ops=len(covered_ops))
    if set(old.skips) - covered_ops and old.source != Source():  # entries of an earlier run are kept
        source = source.model_copy(update={"earlier": old.source.model_copy(update={"earlier": None})})
    new = SkipList(backend=backend, source=source, skips=skips, expectations=tuple(rules))
    save(new, path)
    old_groups = {(op, d) for op, ds in old.skips.items() for d in ds}
    new_groups = {(op, d) for op, ds in new.skips.items() for d in ds}
    old_failures = {_failure_key(r) for r in old.expectations if r.tier == TIER}
    new_failures = {_failure_key(r) for r in new.expectations if r.tier == TIER}
    return {
        "path": str(path),
        "skipped_groups": len(new_groups),
        "expected_failures": len(new.expectations),
        "ops_rewritten": len(covered_ops),
        "groups_added": sorted(f"{o}/{d}" for o, d in new_groups - old_groups),
        "groups_removed": sorted(f"{o}/{d}" for o, d in old_groups - new_groups),
        "failures_added": sorted(new_failures - old_failures),
        "failures_removed": sorted(old_failures - new_failures),
    }


def skips_changed(skips: SkipList, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The (op, dtype) groups the run ran whose skip counts differ from the list's (a subset or a
    shard says nothing of the groups it did not run)."""
    now = census(rows)
    ran = {(_op(r), str(r["dtype"])) for r in rows}
    changed = []
    for op in sorted(set(skips.skips) | set(now)):
        for dtype in sorted(set(skips.skips.get(op, {})) | set(now.get(op, {}))):
            if (op, dtype) not in ran:
                continue
            was, is_ = skips.skips.get(op, {}).get(dtype), now.get(op, {}).get(dtype)
            listed = {r: was.count(r) if was else 0 for r in BACKEND_REASONS}
            current = {r: is_.count(r) if is_ else 0 for r in BACKEND_REASONS}
            if listed != current:
                changed.append(
                    {
                        "op": op,
                        "dtype": dtype,
                        **{f"{r}_listed": n for r, n in listed.items()},
                        **{f"{r}_now": n for r, n in current.items()},
                    }
                )
    return changed


def check_run(
    rundir: str | os.PathLike,
    backend: str = "neuron",
    path: str | os.PathLike | None = None,
    limit: int = 200,
) -> dict[str, Any]:
    """Judge every upstream case-stage of a run against the skip list's expectations, and say which
    skip counts changed."""
    skips = load(path, backend)
    rows = _rows(rundir)
    judged = judge(rows, skips.expectations, backend)
    new_failures = [f"{case}|{stage}" for case, stage in judged["new_failures"]]
    improved = [f"{case}|{stage}" for case, stage in judged["improved"]]
    changed = skips_changed(skips, rows)
    return {
        "labels": judged["labels"],
        "new_failures": new_failures[:limit],
        "new_failures_total": len(new_failures),
        "improved": improved[:limit],
        "improved_total": len(improved),
        "skips_changed": changed[:limit],
        "skips_changed_total": len(changed),
    }
