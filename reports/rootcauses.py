"""Backend failures by root cause: one group per root-cause op and phase, then the failures without one.

Why: on a night with one broken kernel dozens of rows go red for one reason; the report, `harness
compare` and failure_groups.json read them cause by cause. Pure computation over results.parquet's
`root_cause` column (contracts.rootcause.RootCause as JSON); a run written before that column exists
reads as not localized, never as an error.

    groups = root_cause_groups(results)      # [RootCauseGroup], most models first
    rest = unexplained(results)              # [Unexplained]: backend failures without one, with why not
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from contracts.rootcause import RootCause
from contracts.status import FAILING_VALUES, Blame, stage_order

#: the results column holding the record (contracts.rows); `root_cause_op` is derived from it
COLUMN = "root_cause"
EXAMPLES = 3  # case ids named per group


def parse(value: Any) -> RootCause | None:
    """A `root_cause` cell -> its record; null -> None. An unreadable cell is a not-found record that
    says so (the row keeps its place in the report)."""
    if value is None or (isinstance(value, float) and value != value) or value == "":
        return None
    try:
        data = json.loads(value) if isinstance(value, str) else dict(value)
        return RootCause.from_dict(data)
    except (TypeError, ValueError) as exc:
        return RootCause.not_found(f"unreadable root-cause record: {type(exc).__name__}: {exc}"[:200])


def row_records(results: pd.DataFrame) -> list[RootCause | None]:
    """Each row's record, aligned with the rows (all None when the column is absent)."""
    if COLUMN not in results:
        return [None] * len(results)
    cache: dict[str, RootCause | None] = {}
    out: list[RootCause | None] = []
    for value in results[COLUMN].tolist():
        key = value if isinstance(value, str) else None
        if key is None:
            out.append(parse(value))
        else:
            if key not in cache:
                cache[key] = parse(key)
            out.append(cache[key])
    return out


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _ids(value: Any) -> tuple[str, ...]:
    return () if value is None or isinstance(value, float) else tuple(sorted(str(m) for m in value))


def largest_error(rc: RootCause) -> str:
    """What went wrong at the call, in one line: the mismatch against its tolerance, the exception,
    or how the worker died."""
    m = rc.mismatch
    if m is not None:
        return f"max abs {m.max_abs:.3g} (atol {m.atol:.3g}), max rel {m.max_rel:.3g} (rtol {m.rtol:.3g})" + (
            f", {m.tolerance_class}" if m.tolerance_class else ""
        )
    if rc.error_class or rc.message:
        return f"{rc.error_class}: {rc.message}".strip(": ")[:200]
    return rc.kind or ""


def _magnitude(rc: RootCause) -> float:
    """How bad a record is, to pick a group's largest error: the mismatch's max abs error; errors,
    crashes and hangs rank above every mismatch."""
    if rc.mismatch is None:
        return float("inf") if rc.kind else -1.0
    value = rc.mismatch.max_abs
    return value if value == value else float("inf")  # NaN: the worst


def verified_text(verified: bool | None) -> str:
    """A repro's state in words: verified (fails on the backend, passes on the reference), not
    verified, or unchecked."""
    return {True: "verified", False: "not verified", None: "unchecked"}[verified]


def repro_text(rc: RootCause | None) -> str:
    """The repro file and whether it was checked: 'tests/x.py (verified)', '(not verified: why)'."""
    if rc is None or rc.repro is None:
        return ""
    r = rc.repro
    why = f": {r.why}" if r.why and r.verified is not True else ""
    return f"{r.path or 'no file'} ({verified_text(r.verified)}{why})"


def describe(rc: RootCause | None) -> str:
    """One line naming a root cause (op, phase, route, repro), or why none was found."""
    if rc is None:
        return ""
    if not rc.found:
        gave_up = f" (gave up: {rc.gave_up})" if rc.gave_up else ""
        return f"no root cause: {rc.why or 'not found'}{gave_up}"
    where = ", ".join(x for x in (rc.phase, rc.kind, rc.route) if x)
    text = f"{rc.op} ({where})"
    if rc.module_path:
        text += f" in {rc.module_path}"
    repro = repro_text(rc)
    return text + (f"; repro {repro}" if repro else "")


def short(rc: RootCause | None) -> str:
    """A table cell's worth: 'aten.gelu.default (forward) · repro verified', or why none was found."""
    if rc is None:
        return ""
    if not rc.found:
        return f"none: {rc.why or 'not found'}"
    repro = f" · repro {verified_text(rc.repro_verified)}" if rc.repro is not None else ""
    return f"{rc.op} ({rc.phase}){repro}"


@dataclass
class RootCauseGroup:
    """Every failing row localized to one op in one phase: what it explains and its worst instance."""

    op: str
    phase: str
    rows: int  # failing (case, stage) rows it explains
    cases: list[str]  # their case ids, sorted
    tiers: list[str]
    models: int  # distinct models of those cases (model_ids)
    downloads: float  # their downloads (a model set counted once across tiers)
    kinds: list[str]
    routes: list[str]
    largest_error: str
    repro: str  # the repro file of the group's best-checked record ("" when none was written)
    repro_verified: bool | None
    repros_verified: int  # rows whose repro verified
    module_paths: list[str] = field(default_factory=list)  # most frequent first, at most 3
    source_lines: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)  # the largest error's record (RootCause.to_dict)

    @property
    def examples(self) -> list[str]:
        return self.cases[:EXAMPLES]

    @property
    def key(self) -> str:
        return f"{self.op} ({self.phase})" if self.phase else self.op


@dataclass
class Unexplained:
    """Backend failures with no root cause, grouped by where they failed and why none was found."""

    tier: str
    stage: str
    status: str
    why: str
    rows: int
    cases: list[str]
    models: int
    failing_ops: list[str] = field(default_factory=list)  # ops the rows name as raising, most first

    @property
    def examples(self) -> list[str]:
        return self.cases[:EXAMPLES]


def _failing(results: pd.DataFrame) -> pd.Series:
    return results["status"].isin(FAILING_VALUES)


def _backend(results: pd.DataFrame) -> pd.Series:
    if "blame" not in results:
        return pd.Series(False, index=results.index)
    return results["blame"].astype(object).eq(Blame.BACKEND.value)


def _found(rc: RootCause | None) -> bool:
    return rc is not None and rc.found and bool(rc.op)


def found_rows(results: pd.DataFrame) -> list[tuple[dict[str, Any], RootCause]]:
    """The failing rows whose record names a call, each with its record."""
    if results.empty or COLUMN not in results:
        return []
    df = results[_failing(results) & results[COLUMN].notna()]
    return [(row, rc) for row, rc in zip(df.to_dict("records"), row_records(df)) if _found(rc)]


def found_mask(results: pd.DataFrame) -> pd.Series:
    """True for the failing rows whose record names a call (what root_cause_groups explains)."""
    mask = pd.Series(False, index=results.index)
    if results.empty or COLUMN not in results:
        return mask
    df = results[_failing(results) & results[COLUMN].notna()]
    if not df.empty:
        mask.loc[df.index] = [_found(rc) for rc in row_records(df)]
    return mask


def root_cause_groups(results: pd.DataFrame) -> list[RootCauseGroup]:
    """One group per (root-cause op, phase), most models first, then most rows."""
    buckets: dict[tuple[str, str], list[tuple[dict[str, Any], RootCause]]] = {}
    for row, rc in found_rows(results):
        buckets.setdefault((rc.op, rc.phase), []).append((row, rc))
    groups = []
    for (op, phase), members in buckets.items():
        cases = {(_text(r["tier"]), _text(r["case_id"])): r for r, _ in members}
        model_sets: dict[tuple[str, ...], float] = {}
        for r in cases.values():
            ids = _ids(r.get("model_ids"))
            if ids:
                weight = r.get("weight")
                model_sets[ids] = max(model_sets.get(ids, 0.0), float(weight) if weight == weight else 0.0)
        models = {m for ids in model_sets for m in ids}
        worst = max((rc for _, rc in members), key=_magnitude)
        checked = sorted(
            (rc for _, rc in members if rc.repro is not None),
            key=lambda rc: {True: 0, None: 1, False: 2}[rc.repro.verified] + (0 if rc.repro.path else 3),
        )
        best = checked[0] if checked else None
        groups.append(
            RootCauseGroup(
                op=op,
                phase=phase,
                rows=len(members),
                cases=sorted({c for _, c in cases}),
                tiers=sorted({t for t, _ in cases}),
                models=len(models),
                downloads=sum(model_sets.values()),
                kinds=sorted({rc.kind for _, rc in members if rc.kind}),
                routes=sorted({rc.route for _, rc in members if rc.route}),
                largest_error=largest_error(worst),
                repro=best.repro.path if best else "",
                repro_verified=best.repro.verified if best else None,
                repros_verified=sum(1 for _, rc in members if rc.repro_verified is True),
                module_paths=[
                    p
                    for p, _ in Counter(rc.module_path for _, rc in members if rc.module_path).most_common(3)
                ],
                source_lines=[
                    p
                    for p, _ in Counter(rc.source_line for _, rc in members if rc.source_line).most_common(3)
                ],
                record=worst.to_dict(),
            )
        )
    return sorted(groups, key=lambda g: (-g.models, -g.rows, g.op, g.phase))


def why_not(row: dict[str, Any], rc: RootCause | None, has_column: bool, model_tiers: set[str]) -> str:
    """Why a backend failure has no root cause: its record's reason, else what kept it unlocalized."""
    if rc is not None:
        if rc.found:  # a record naming no op
            return "the record names no op"
        return (rc.why or "not found") + (f" (gave up: {rc.gave_up})" if rc.gave_up else "")
    fallback_ops = row.get("fallback_ops")
    if row.get("stage") == "on_device" and fallback_ops is not None and len(fallback_ops):
        return "a CPU fallback, not a wrong call: its ops are under skips and fallbacks"
    if _text(row.get("tier")) not in model_tiers:
        return "not localized: an op-level case (the case is the op)"
    if not has_column:
        return "not localized: the run has no root-cause column"
    return "not localized"


def unexplained(results: pd.DataFrame) -> list[Unexplained]:
    """Failing rows blamed on the backend whose record names no call (or that have none), grouped by
    (tier, stage, status, why not); most models first."""
    if results.empty:
        return []
    df = results[_failing(results) & _backend(results)]
    if df.empty:
        return []
    has_column = COLUMN in results
    model_tiers = set(results.loc[results["stage"] == "load", "tier"].astype(str))
    buckets: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for row, rc in zip(df.to_dict("records"), row_records(df)):
        if _found(rc):
            continue
        why = why_not(row, rc, has_column, model_tiers)
        key = (_text(row["tier"]), _text(row["stage"]), _text(row["status"]), why)
        buckets.setdefault(key, []).append(row)
    out = []
    for (tier, stage, status, why), rows in buckets.items():
        cases = {_text(r["case_id"]): r for r in rows}
        models = {m for r in cases.values() for m in _ids(r.get("model_ids"))}
        ops = Counter(_text(r.get("failing_op")) for r in rows if _text(r.get("failing_op")))
        out.append(
            Unexplained(
                tier,
                stage,
                status,
                why,
                len(rows),
                sorted(cases),
                len(models),
                [o for o, _ in ops.most_common(3)],
            )
        )
    return sorted(out, key=lambda u: (-u.models, -u.rows, u.tier, stage_order(u.stage), u.stage, u.why))


def case_records(results: pd.DataFrame) -> dict[tuple[str, str], dict[str, RootCause]]:
    """(tier, case_id) -> {stage: record}, for every row that has one."""
    if results.empty or COLUMN not in results:
        return {}
    df = results[results[COLUMN].notna()]
    keys = zip(df["tier"].astype(str), df["case_id"].astype(str), df["stage"].astype(str))
    out: dict[tuple[str, str], dict[str, RootCause]] = {}
    for (tier, case_id, stage), rc in zip(keys, row_records(df)):
        if rc is not None:
            out.setdefault((tier, case_id), {})[stage] = rc
    return out


def for_row(
    records: dict[tuple[str, str], dict[str, RootCause]],
    tier: str,
    case_id: str,
    stage: str,
    status: str | None,
) -> tuple[RootCause | None, str | None]:
    """The root cause of one (tier, case, stage) and the stage it was found on: the row's own record;
    for a stage not attempted, else the found record of the earliest stage of the case that ran
    before it (the failure that stopped it)."""
    stages = records.get((tier, case_id), {})
    if stage in stages:
        return stages[stage], stage
    if status != "not_attempted":
        return None, None
    earlier = sorted(
        (stage_order(s), s)
        for s, rc in stages.items()
        if rc.found and rc.op and stage_order(s) <= stage_order(stage) and s != stage
    )
    if not earlier:
        return None, None
    return stages[earlier[0][1]], earlier[0][1]
