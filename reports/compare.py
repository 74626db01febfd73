"""Compare a run with a baseline: one verdict per (tier, case, stage), and direction-aware metrics.

The comparison vocabulary (contracts.status.Verdict; separate from Status, which says how a stage ended):

    PASS      as good as the baseline: passes (or is unchanged and not failing)
    FAIL      new failure: failing now, and neither failing in the baseline nor expected
    XFAIL     known failure: matches reports/data/expectations.yaml, or failed in the baseline too
    IMPROVED  passes now but failed / was not attempted in the baseline, or was expected to fail
    MISSING   in the baseline, absent from the run
    FLAKY     status changed, and the case is on reports/data/flaky.yaml

A stage that passed in the baseline and is now skipped or not attempted is a FAIL: coverage was
lost, and the detail says why. The exit code is non-zero when there is any FAIL.

Usage::

    from reports.compare import compare_runs
    result = compare_runs("runs/today", "baseline")
    result.exit_code, result.counts
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from contracts.status import FAILING_VALUES, STATUS_VALUES, Verdict

KEY = ["tier", "case_id", "stage"]


# ----------------------------------------------------------------------------- checked-in data files

@dataclass(frozen=True)
class Rule:
    """One expectations / flaky entry: globs over the case key, and why."""

    reason: str
    tier: str = "*"
    case_id: str = "*"
    stage: str = "*"
    model_id: str = "*"
    status: tuple[str, ...] = ()

    def matches(self, tier: str, case_id: str, stage: str, model_ids: list[str]) -> bool:
        return (fnmatch.fnmatchcase(tier, self.tier) and fnmatch.fnmatchcase(case_id, self.case_id)
                and fnmatch.fnmatchcase(stage, self.stage)
                and (self.model_id == "*" or any(fnmatch.fnmatchcase(m, self.model_id) for m in model_ids)))


def _load_rules(path: str | Path | None, default: str, key: str) -> list[Rule]:
    text = (Path(path).read_text() if path else resources.files("reports").joinpath(f"data/{default}").read_text())
    data = yaml.safe_load(text) or {}
    rules = []
    for i, entry in enumerate(data.get(key) or []):
        if not isinstance(entry, dict) or not entry.get("reason"):
            raise ValueError(f"{path or default}: {key}[{i}] needs a 'reason' (why it is known)")
        status = entry.get("status") or ()
        status = (status,) if isinstance(status, str) else tuple(status)
        bad = [s for s in status if s not in STATUS_VALUES]
        if bad:
            raise ValueError(f"{path or default}: {key}[{i}] has unknown status {bad}")
        rules.append(Rule(reason=str(entry["reason"]), status=status,
                          **{k: str(entry[k]) for k in ("tier", "case_id", "stage", "model_id") if k in entry}))
    return rules


def load_expectations(path: str | Path | None = None) -> list[Rule]:
    return _load_rules(path, "expectations.yaml", "expectations")


def load_flaky(path: str | Path | None = None) -> list[Rule]:
    return _load_rules(path, "flaky.yaml", "flaky")


@functools.cache
def metric_rules() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(resources.files("reports").joinpath("data/metrics.yaml").read_text())
    return dict(data["metrics"])


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
class Comparison:
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
            "run": self.run, "baseline": self.baseline, "counts": self.counts, "exit_code": self.exit_code,
            "new_failures": rows(Verdict.FAIL), "improved": rows(Verdict.IMPROVED),
            "missing": rows(Verdict.MISSING), "flaky": rows(Verdict.FLAKY), "xfail": rows(Verdict.XFAIL),
            "metrics": {"worse": [asdict(m) for m in self.metrics if m.direction == "worse"],
                        "better": [asdict(m) for m in self.metrics if m.direction == "better"]},
            "update_command": self.update_command, **_gate_summary(self),
        }


def _gate_summary(comparison: "Comparison") -> dict[str, Any]:
    from reports.gate import summary

    return summary(comparison, comparison.gate)


# ---------------------------------------------------------------------------------------- compare

def _verdict(status: str | None, base: str | None, model_ids: list[str], key: tuple[str, str, str],
             expectations: list[Rule], flaky: list[Rule]) -> tuple[Verdict, str]:
    if status is None:
        return Verdict.MISSING, f"was {base} in the baseline"
    if base is not None and status != base:
        rule = next((r for r in flaky if r.matches(*key, model_ids)), None)
        if rule:
            return Verdict.FLAKY, f"{base} -> {status}; flaky: {rule.reason}"
    known = [r for r in expectations if r.matches(*key, model_ids)]
    if status == "pass":
        if known:
            return Verdict.IMPROVED, f"passes; was expected to fail ({known[0].reason}): remove the expectation"
        if base is not None and base != "pass":
            return Verdict.IMPROVED, f"{base} -> pass"
        return Verdict.PASS, ""
    if status in FAILING_VALUES:
        expected = next((r for r in known if not r.status or status in r.status), None)
        if expected:
            return Verdict.XFAIL, f"expected: {expected.reason}"
        if base in FAILING_VALUES:
            return Verdict.XFAIL, f"failed in the baseline too ({base} -> {status})"
        return Verdict.FAIL, f"{base or 'new case'} -> {status}"
    # skipped / not_attempted
    if base == "pass":
        return Verdict.FAIL, f"pass -> {status}: coverage lost"
    return Verdict.PASS, f"unchanged: {status}" if base == status else f"{base or 'new case'} -> {status}"


def _metric_deltas(merged: pd.DataFrame, time_rel: float | None) -> list[MetricDelta]:
    out = []
    for metric, rule in metric_rules().items():
        cur, base = f"{metric}_run", f"{metric}_base"
        if cur not in merged or base not in merged:
            continue
        min_rel = time_rel if (metric == "seconds" and time_rel is not None) else rule.get("min_rel")
        sign = -1.0 if rule.get("better", "lower") == "lower" else 1.0
        c, b = merged[cur].astype("float64"), merged[base].astype("float64")
        delta = c - b
        mask = c.notna() & b.notna() & (delta != 0) & (delta.abs() >= float(rule.get("min_abs", 0)))
        if min_rel is not None:
            mask &= (b == 0) | (delta.abs() >= float(min_rel) * b.abs())
        hit = merged.loc[mask, KEY]
        for (tier, case_id, stage), cv, bv, dv in zip(hit.itertuples(index=False, name=None), c[mask].tolist(),
                                                      b[mask].tolist(), delta[mask].tolist()):
            out.append(MetricDelta(tier, case_id, stage, metric, bv, cv, dv, "better" if sign * dv > 0 else "worse"))
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


def compare_frames(run: pd.DataFrame, baseline: pd.DataFrame, *, run_name: str = "run",
                   baseline_name: str = "baseline", expectations: list[Rule] | None = None,
                   flaky: list[Rule] | None = None, time_threshold: float | None = None,
                   gate: str = "backend") -> Comparison:
    """Compare two results tables (reports.schema.RESULTS); pure computation.

    Verdicts without a matching rule depend only on the (status, baseline status) pair, so they are
    decided once per pair: a 250,000-row comparison stays a few seconds.
    """
    expectations = load_expectations() if expectations is None else expectations
    flaky = load_flaky() if flaky is None else flaky
    metrics = [m for m in metric_rules() if m in run.columns and m in baseline.columns]
    cols = KEY + ["status", "model_ids", "blame"] + metrics

    def side(df: pd.DataFrame) -> pd.DataFrame:  # object keys: pandas cannot merge empty Arrow-backed keys
        df = df if "blame" in df else df.assign(blame=None)
        return df[cols].drop_duplicates(KEY, keep="last").astype({k: object for k in KEY})

    merged = pd.merge(side(run), side(baseline), on=KEY, how="outer", suffixes=("_run", "_base"), indicator=True)
    merged = merged.sort_values(KEY, ignore_index=True)
    where = merged["_merge"].astype(str).tolist()
    status = [None if w == "right_only" else s for w, s in zip(where, merged["status_run"].tolist())]
    base = [None if w == "left_only" else s for w, s in zip(where, merged["status_base"].tolist())]
    ruled = _rule_rows(merged, expectations + flaky)
    ids_run, ids_base = merged["model_ids_run"].tolist(), merged["model_ids_base"].tolist()
    blames = _row_blames(merged)
    by_pair: dict[tuple[Any, Any], tuple[Verdict, str]] = {}
    verdicts = []
    for i, key in enumerate(zip(merged["tier"].tolist(), merged["case_id"].tolist(), merged["stage"].tolist())):
        st, bs = status[i], base[i]
        ids: list[str] | None = None
        if i in ruled:
            ids = _ids(ids_run[i] if st is not None else ids_base[i])
            verdict, detail = _verdict(st, bs, ids, key, expectations, flaky)
        else:
            if (st, bs) not in by_pair:
                by_pair[(st, bs)] = _verdict(st, bs, [], key, [], [])
            verdict, detail = by_pair[(st, bs)]
        if verdict is not Verdict.PASS and ids is None:  # model ids only where someone will read them
            ids = _ids(ids_run[i] if st is not None else ids_base[i])
        verdicts.append(CaseVerdict(*key, verdict, st, bs, detail, ids or [], blames[i]))
    return Comparison(run_name, baseline_name, verdicts, _metric_deltas(merged, time_threshold), gate=gate)


def _row_blames(merged: pd.DataFrame) -> list[str | None]:
    """Each merged row's blame: the run's, else (a MISSING row) the baseline's."""
    run, base = merged["blame_run"].tolist(), merged["blame_base"].tolist()
    clean = [None if (b is None or b != b or b == "") else str(b) for b in run]
    return [r if r is not None else (None if (b is None or b != b or b == "") else str(b))
            for r, b in zip(clean, base)]


def compare_runs(run_dir: str | Path, baseline_dir: str | Path, **kwargs: Any) -> Comparison:
    from reports.tables import read_results

    return compare_frames(read_results(run_dir), read_results(baseline_dir), run_name=str(run_dir),
                          baseline_name=str(baseline_dir), **kwargs)
