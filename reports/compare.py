"""Compare a run with a baseline: one verdict per (tier, case, stage), and direction-aware metrics.

The comparison vocabulary (contracts.status.Verdict; separate from Status, which says how a stage ended):

    PASS      as good as the baseline: passes (or is unchanged and not failing)
    FAIL      new failure: failing now, and neither failing in the baseline nor expected; or a
              changed failure: failing in both, with another error class or failing op
    XFAIL     known failure: matches an expectation (reports.expectations), or failed the same way in the
              baseline
    IMPROVED  passes now but failed / was not attempted in the baseline, or was expected to fail
    MISSING   in the baseline, absent from the run
    FLAKY     status changed, and the case is on reports/data/flaky.yaml
    FALLBACK_REGRESSION  same status, but a new CPU-fallback op or a higher fallback count

Changed failures and fallback regressions are found by reports/hidden_regressions.py. Every verdict
that is not PASS names its row's root cause (`root_cause`: contracts.rootcause.RootCause as a dict,
found or why not; `root_cause_stage`: the stage it was found on, an earlier one for a stage not
attempted because of it), from the run's `root_cause` column (reports.rootcauses).

A stage that passed in the baseline and is now skipped or not attempted is a FAIL: coverage was
lost, and the detail says why. The exit code is non-zero when a regression (FAIL,
FALLBACK_REGRESSION: contracts.status.REGRESSION_VERDICTS) gates (reports.gate).

Usage::

    from reports.compare import compare_runs
    result = compare_runs("runs/today", "baseline")
    result.exit_code, result.counts
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from contracts.rulefiles import Rules, cached_rules, resource
from contracts.status import Verdict
from reports import hidden_regressions, rootcauses
from reports.expectations import Rule, for_backend, load_expectations, load_flaky
from reports.verdicts import verdict_of

KEY = ["tier", "case_id", "stage"]


class MetricRule(Rules):
    """How one metric is compared: which direction is better, and the smallest change reported."""

    better: Literal["lower", "higher"] = "lower"
    min_abs: float = 0.0
    min_rel: float | None = None


class MetricRules(Rules):
    """reports/data/metrics.yaml."""

    version: int
    metrics: dict[str, MetricRule]


def metric_rules() -> dict[str, MetricRule]:
    return cached_rules(MetricRules, str(resource("reports", "data/metrics.yaml"))).metrics


# ---------------------------------------------------------------------------------------- records


@dataclass
class CaseVerdict:
    tier: str
    case_id: str
    stage: str
    verdict: Verdict
    status: str | None  # in the run (None: MISSING)
    baseline_status: str | None  # in the baseline (None: new case)
    detail: str = ""
    model_ids: list[str] = field(default_factory=list)
    blame: str | None = None  # the run's row blame (the baseline's for MISSING): reports.gate decides on it
    root_cause: dict[str, Any] | None = None  # the run row's root-cause record (RootCause.to_dict())
    root_cause_stage: str | None = None  # the stage that record is on


@dataclass
class MetricDelta:
    tier: str
    case_id: str
    stage: str
    metric: str
    baseline: float
    current: float
    delta: float
    direction: str  # "worse" | "better"


@dataclass
class RunComparison:
    """A run against a baseline: a verdict per (tier, case, stage) and the metric changes. Not
    harness.stages.compare.TensorComparison nor registry.replay.OpComparison (one tensor, one op call)."""

    run: str
    baseline: str
    verdicts: list[CaseVerdict]
    metrics: list[MetricDelta]
    gate: str = "backend"  # reports.gate.GATES: which regressions make the exit code 1

    @property
    def counts(self) -> dict[str, int]:
        counts = {v.value: 0 for v in Verdict}
        for v in self.verdicts:
            counts[v.verdict.value] += 1
        return counts

    def of(self, verdict: Verdict) -> list[CaseVerdict]:
        return [v for v in self.verdicts if v.verdict is verdict]

    @property
    def exit_code(self) -> int:
        """1 when a regression gates (reports.gate: the backend's by default, every one with gate "all")."""
        from reports.gate import gated

        return 1 if gated(self, self.gate) else 0

    @property
    def update_command(self) -> str:
        return f"harness baseline update {self.run}"

    def to_dict(self) -> dict[str, Any]:
        def rows(verdict: Verdict) -> list[dict[str, Any]]:
            return [{**asdict(v), "verdict": v.verdict.value} for v in self.of(verdict)]

        return {
            "run": self.run,
            "baseline": self.baseline,
            "counts": self.counts,
            "exit_code": self.exit_code,
            "new_failures": rows(Verdict.FAIL),
            "fallback_regressions": rows(Verdict.FALLBACK_REGRESSION),
            "improved": rows(Verdict.IMPROVED),
            "missing": rows(Verdict.MISSING),
            "flaky": rows(Verdict.FLAKY),
            "xfail": rows(Verdict.XFAIL),
            "metrics": {
                "worse": [asdict(m) for m in self.metrics if m.direction == "worse"],
                "better": [asdict(m) for m in self.metrics if m.direction == "better"],
            },
            "update_command": self.update_command,
            **_gate_summary(self),
        }


def _gate_summary(comparison: RunComparison) -> dict[str, Any]:
    from reports.gate import summary

    return summary(comparison, comparison.gate)


# ---------------------------------------------------------------------------------------- compare


def _metric_deltas(merged: pd.DataFrame, time_rel: float | None) -> list[MetricDelta]:
    out = []
    for metric, rule in metric_rules().items():
        cur, base = f"{metric}_run", f"{metric}_base"
        if cur not in merged or base not in merged:
            continue
        min_rel = time_rel if (metric == "seconds" and time_rel is not None) else rule.min_rel
        sign = -1.0 if rule.better == "lower" else 1.0
        c, b = merged[cur].astype("float64"), merged[base].astype("float64")
        delta = c - b
        mask = c.notna() & b.notna() & (delta != 0) & (delta.abs() >= rule.min_abs)
        if min_rel is not None:
            mask &= (b == 0) | (delta.abs() >= float(min_rel) * b.abs())
        hit = merged.loc[mask, KEY]
        for (tier, case_id, stage), cv, bv, dv in zip(
            hit.itertuples(index=False, name=None), c[mask].tolist(), b[mask].tolist(), delta[mask].tolist()
        ):
            out.append(
                MetricDelta(tier, case_id, stage, metric, bv, cv, dv, "better" if sign * dv > 0 else "worse")
            )
    return out


def _rule_rows(merged: pd.DataFrame, rules: list[Rule]) -> set[int]:
    """Row positions any rule may match (tier/case/stage globs, vectorized; model_id checked per row)."""
    rows: set[int] = set()
    columns = {col: merged[col].astype(str).tolist() for col in ("tier", "case_id", "stage")}
    for rule in rules:
        candidates = range(len(merged))
        for col in ("tier", "case_id", "stage"):
            pattern = getattr(rule, col)
            if pattern != "*":
                rx = re.compile(fnmatch.translate(pattern))
                values = columns[col]
                candidates = [i for i in candidates if rx.match(values[i])]
        rows.update(candidates)
    return rows


def _ids(value: Any) -> list[str]:
    return [] if value is None or isinstance(value, float) else [str(m) for m in value]


def compare_frames(
    run: pd.DataFrame,
    baseline: pd.DataFrame,
    *,
    run_name: str = "run",
    baseline_name: str = "baseline",
    expectations: list[Rule] | None = None,
    flaky: list[Rule] | None = None,
    time_threshold: float | None = None,
    gate: str = "backend",
    backend: str | None = None,
) -> RunComparison:
    """Compare two results tables (reports.schema.RESULTS) of runs on `backend`; pure computation.

    Rules naming another backend do not apply (backend None: only rules for every backend).
    Verdicts without a matching rule depend only on the (status, baseline status) pair, so they are
    decided once per pair: a 250,000-row comparison stays a few seconds.
    """
    expectations = for_backend(load_expectations() if expectations is None else expectations, backend)
    flaky = for_backend(load_flaky() if flaky is None else flaky, backend)
    metrics = [m for m in metric_rules() if m in run.columns and m in baseline.columns]
    cols = KEY + ["status", "model_ids", "blame"] + metrics
    cols += [c for c in hidden_regressions.available(run, baseline) if c not in cols]

    def side(df: pd.DataFrame) -> pd.DataFrame:  # object keys: pandas cannot merge empty Arrow-backed keys
        df = df if "blame" in df else df.assign(blame=None)
        return df[cols].drop_duplicates(KEY, keep="last").astype({k: object for k in KEY})

    merged = pd.merge(
        side(run), side(baseline), on=KEY, how="outer", suffixes=("_run", "_base"), indicator=True
    )
    merged = merged.sort_values(KEY, ignore_index=True)
    where = merged["_merge"].astype(str).tolist()
    status = [None if w == "right_only" else s for w, s in zip(where, merged["status_run"].tolist())]
    base = [None if w == "left_only" else s for w, s in zip(where, merged["status_base"].tolist())]
    ruled = _rule_rows(merged, expectations + flaky)
    ids_run, ids_base = merged["model_ids_run"].tolist(), merged["model_ids_base"].tolist()
    blames = _row_blames(merged)
    by_pair: dict[tuple[Any, Any], tuple[Verdict, str]] = {}
    verdicts = []
    for i, key in enumerate(
        zip(merged["tier"].tolist(), merged["case_id"].tolist(), merged["stage"].tolist())
    ):
        st, bs = status[i], base[i]
        ids: list[str] | None = None
        if i in ruled:
            ids = _ids(ids_run[i] if st is not None else ids_base[i])
            known = [r for r in expectations if r.matches(*key, ids)]
            flaky_rule = next((r for r in flaky if r.matches(*key, ids)), None)
            verdict, detail = verdict_of(st, bs, known, flaky_rule)
        else:
            if (st, bs) not in by_pair:
                by_pair[(st, bs)] = verdict_of(st, bs, [], None)
            verdict, detail = by_pair[(st, bs)]
        if verdict is not Verdict.PASS and ids is None:  # model ids only where someone will read them
            ids = _ids(ids_run[i] if st is not None else ids_base[i])
        verdicts.append(CaseVerdict(*key, verdict, st, bs, detail, ids or [], blames[i]))
    hidden_regressions.refine(merged, verdicts)
    _name_root_causes(run, verdicts)
    return RunComparison(run_name, baseline_name, verdicts, _metric_deltas(merged, time_threshold), gate=gate)


def _name_root_causes(run: pd.DataFrame, verdicts: list[CaseVerdict]) -> None:
    """Each verdict that is not PASS names the root cause of its row in the run, when there is one."""
    records = rootcauses.case_records(run)
    if not records:
        return
    for v in verdicts:
        if v.verdict is Verdict.PASS or v.status is None:
            continue
        rc, stage = rootcauses.for_row(records, v.tier, v.case_id, v.stage, v.status)
        if rc is not None:
            v.root_cause, v.root_cause_stage = rc.to_dict(), stage


def _row_blames(merged: pd.DataFrame) -> list[str | None]:
    """Each merged row's blame: the run's, else (a MISSING row) the baseline's."""
    run, base = merged["blame_run"].tolist(), merged["blame_base"].tolist()
    clean = [None if (b is None or b != b or b == "") else str(b) for b in run]
    return [
        r if r is not None else (None if (b is None or b != b or b == "") else str(b))
        for r, b in zip(clean, base)
    ]


def run_backend(run_dir: str | Path) -> str | None:
    """The backend a run ran on (runs.parquet), None when it does not say or names several."""
    from reports.tables import read_table

    names = {b for b in read_table(run_dir, "runs")["backend"].dropna().tolist()}
    return names.pop() if len(names) == 1 else None


def compare_runs(run_dir: str | Path, baseline_dir: str | Path, **kwargs: Any) -> RunComparison:
    from reports.tables import read_results

    kwargs.setdefault("backend", run_backend(run_dir))
    return compare_frames(
        read_results(run_dir),
        read_results(baseline_dir),
        run_name=str(run_dir),
        baseline_name=str(baseline_dir),
        **kwargs,
    )
