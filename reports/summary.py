"""The report's first screen, as pure computation: per tier the pass shares with their denominators,
and skips and fallbacks aggregated by op, dtype and reason (never one row per sample).

Why: a backend engineer reads a nightly in a minute: how much passes, what regressed, which ops
broke it (reports.rootcauses), which ops fall back. Hundreds of upstream samples skipped for one op
are one line here; the per-sample rows stay further down the page.

    rows = tier_rows(results, cov.levels)
    groups = skips_and_fallbacks(results, read_table(run, "fallbacks"))
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from contracts.status import FAILING_VALUES, OK_VALUES, Blame, Status, stage_order


@dataclass
class TierRow:
    """One tier at a glance: cases by headline status (a case's first stage that neither passed nor
    was skipped decides it), failing cases by blame, and the model tiers' levels."""

    tier: str
    cases: int
    models: int
    downloads: float
    passed: int
    failing: int
    failing_by_blame: dict[str, int]  # failing cases per blame of the failing stage ("none": not judged)
    skipped: int
    not_attempted: int
    levels: list[Any] = field(default_factory=list)  # reports.coverage.LevelCoverage of this tier

    def level(self, name: str) -> Any | None:
        """This tier's coverage at the level called `name` (None: not a model tier)."""
        return next((lv for lv in self.levels if lv.level == name), None)

    @property
    def failing_backend(self) -> int:
        return self.failing_by_blame.get(Blame.BACKEND.value, 0)

    @property
    def failing_other(self) -> int:
        return self.failing - self.failing_backend


def tier_rows(results: pd.DataFrame, levels: Iterable[Any] = ()) -> list[TierRow]:
    if results.empty:
        return []
    df = results.assign(
        _rank=[stage_order(s) for s in results["stage"].astype(str)],
        _blame=(results["blame"] if "blame" in results else pd.Series(None, index=results.index))
        .astype(object)
        .where(lambda b: b.notna() & (b != ""), "none"),
        n_models=results["n_models"].fillna(0).astype(int),
        weight=results["weight"].fillna(0.0).astype(float),
    )
    cases = (
        df.assign(_pass=df["status"] == Status.PASS.value)
        .groupby(["tier", "case_id"], sort=False)
        .agg(n_models=("n_models", "first"), weight=("weight", "first"), any_pass=("_pass", "any"))
    )
    bad = df[~df["status"].isin(OK_VALUES)].sort_values(["_rank", "stage"], kind="stable")
    first_bad = bad.groupby(["tier", "case_id"], sort=False)[["status", "_blame"]].first()
    cases = cases.join(first_bad, how="left")
    headline = cases["status"].where(
        cases["status"].notna(), cases["any_pass"].map({True: Status.PASS.value, False: Status.SKIPPED.value})
    )
    cases = cases.assign(headline=headline)
    by_tier: dict[str, list[Any]] = {}
    for lv in levels:
        by_tier.setdefault(lv.tier, []).append(lv)
    out = []
    for tier, g in cases.groupby(level="tier", sort=True):
        failing = g[g["headline"].isin(FAILING_VALUES)]
        out.append(
            TierRow(
                tier=str(tier),
                cases=len(g),
                models=int(g["n_models"].sum()),
                downloads=float(g["weight"].sum()),
                passed=int((g["headline"] == Status.PASS.value).sum()),
                failing=len(failing),
                failing_by_blame={str(k): int(v) for k, v in failing["_blame"].value_counts().items()},
                skipped=int((g["headline"] == Status.SKIPPED.value).sum()),
                not_attempted=int((g["headline"] == Status.NOT_ATTEMPTED.value).sum()),
                levels=by_tier.get(str(tier), []),
            )
        )
    return out


@dataclass
class SkipOrFallback:
    """Samples skipped, or calls that fell back to the CPU, for one (op, dtype, reason)."""

    kind: str  # "skipped" (a result row skipped) | "fallback" (fallback events)
    op: str  # the op (an upstream OpInfo name, or an op overload for fallbacks); "" when the row names none
    dtype: str  # the sample's dtype, or the fallback call's input dtypes
    reason: str
    blame: str  # the rows' blame ("backend" for fallbacks: a missing lowering is the device's)
    tiers: list[str]
    cases: int  # distinct cases (samples) affected
    models: int  # models those cases stand for
    rows: int  # result rows (skipped) or fallback events
    calls: int | None = None  # fallback calls (None for skips)
    stages: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _dtypes(value: Any) -> str:
    """A fallback event's input dtypes as text: '["float32", "bool"]' -> 'float32, bool'."""
    text = _text(value)
    try:
        parsed = json.loads(text)
    except ValueError:
        return text.strip("[]")
    return ", ".join(str(d) for d in parsed) if isinstance(parsed, list) else text


def _op_label(op: Any, variant: Any) -> str:
    op, variant = _text(op), _text(variant)
    return f"{op}.{variant}" if op and variant else op


def _skips(results: pd.DataFrame) -> list[SkipOrFallback]:
    df = results[results["status"] == Status.SKIPPED.value]
    if df.empty:
        return []
    cols = {
        c: (df[c] if c in df else pd.Series(None, index=df.index))
        for c in ("op", "variant", "dtype", "blame")
    }
    df = df.assign(
        _op=[_op_label(o, v) for o, v in zip(cols["op"], cols["variant"])],
        _dtype=cols["dtype"].map(_text),
        _reason=df["reason"].map(_text),
        _blame=cols["blame"].map(_text).replace("", "none"),
        n_models=df["n_models"].fillna(0).astype(int),
    )
    out = []
    for (op, dtype, reason, blame), g in df.groupby(["_op", "_dtype", "_reason", "_blame"], sort=False):
        per_case = g.drop_duplicates(["tier", "case_id"])
        out.append(
            SkipOrFallback(
                kind="skipped",
                op=op,
                dtype=dtype,
                reason=reason,
                blame=blame,
                tiers=sorted(g["tier"].astype(str).unique()),
                cases=len(per_case),
                models=int(per_case["n_models"].sum()),
                rows=len(g),
                stages=sorted(g["stage"].astype(str).unique(), key=lambda s: (stage_order(s), s)),
                examples=sorted(per_case["case_id"].astype(str))[:3],
            )
        )
    return out


def _fallbacks(results: pd.DataFrame, fallbacks: pd.DataFrame | None) -> list[SkipOrFallback]:
    if fallbacks is None or fallbacks.empty:
        return []
    models = {}
    if not results.empty:
        per_case = results.drop_duplicates(["tier", "case_id"])
        models = dict(
            zip(
                zip(per_case["tier"].astype(str), per_case["case_id"].astype(str)),
                per_case["n_models"].fillna(0).astype(int),
            )
        )
    df = fallbacks.assign(
        _case=[
            (_text(t), _text(c) or f"model:{_text(m)}")
            for t, c, m in zip(fallbacks["tier"], fallbacks["case_id"], fallbacks["model_id"])
        ],
        _dtype=fallbacks["input_dtypes"].map(_dtypes),
        _reason=fallbacks["reason"].map(_text),
        _count=fallbacks["count"].fillna(1).astype(int),
    )
    out = []
    for (op, dtype, reason), g in df.groupby(["op", "_dtype", "_reason"], sort=False):
        cases = set(g["_case"])
        out.append(
            SkipOrFallback(
                kind="fallback",
                op=str(op),
                dtype=dtype,
                reason=reason,
                blame=Blame.BACKEND.value,
                tiers=sorted({t for t, _ in cases if t}),
                cases=len(cases),
                models=sum(models.get(c, 1 if c[1].startswith("model:") else 0) for c in cases),
                rows=len(g),
                calls=int(g["_count"].sum()),
                examples=sorted(c for _, c in cases)[:3],
            )
        )
    return out


def skips_and_fallbacks(results: pd.DataFrame, fallbacks: pd.DataFrame | None = None) -> list[SkipOrFallback]:
    """Every skipped row and every fallback event, aggregated by (op, dtype, reason[, blame]): the
    most models first, then the most cases, then the most calls."""
    rows = _fallbacks(results, fallbacks) + (_skips(results) if not results.empty else [])
    return sorted(rows, key=lambda r: (-r.models, -r.cases, -(r.calls or 0), r.kind, r.op, r.dtype, r.reason))


def backends(rows: Iterable[SkipOrFallback]) -> list[SkipOrFallback]:
    """The device's share: fallbacks, and skips blamed on the backend (no native lowering, unsupported)."""
    return [r for r in rows if r.blame == Blame.BACKEND.value]
