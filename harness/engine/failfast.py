"""Stop a run at its first regressions against a baseline (`harness run --maxfail N`, `--exitfirst`).

Why: a CI job that checks a change wants the first sign that it broke something, not the whole
tier first (pytest's -x / --maxfail). A *regression* is exactly what `harness compare` gates on by
default (reports.compare + reports.gate, one definition): a (case, stage) row whose verdict against
the baseline is a new or changed failure (FAIL) blamed on the backend or not judged, or a
FALLBACK_REGRESSION (the stage gained a CPU-fallback op or its fallback count rose: a lost lowering,
whatever the status). A case that failed the same way in the baseline, or matches an expectation,
is no regression. Rows are judged as they land, with the blame the worker gave them: a row only the
runner's later reference re-run could blame is not judged yet, and compare gates such a row too.
After the N-th regressing case no new chunk is dispatched; chunks already running finish and are
journaled, so the run directory stays a valid, resumable run: the same command again continues with
the cases not yet run (and stops at the next regression).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from contracts.records import CaseOutcome
from contracts.rows import case_rows


def baseline_results(path: str | Path, tier: str) -> pd.DataFrame:
    """The rows of `tier` in the baseline's results tables (a baseline dir, a run dir or a nightly
    dir, as ordering reads them). Raises ValueError when there are none to compare with: stopping
    at regressions against nothing would stop at nothing, silently."""
    from reports.tables import read_results

    root = Path(path)
    dirs = (
        [root]
        if (root / "results.parquet").is_file()
        else sorted(d for d in root.iterdir() if (d / "results.parquet").is_file())
        if root.is_dir()
        else []
    )
    frames = [df[df["tier"] == tier] for df in (read_results(d) for d in dirs)]
    frames = [f for f in frames if len(f)]
    if not frames:
        raise ValueError(
            f"--maxfail/--exitfirst: the baseline {root} has no results of tier {tier!r} to compare with"
        )
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def outcome_frame(outcomes: Iterable[CaseOutcome]) -> pd.DataFrame:
    """Case outcomes as results.parquet rows (contracts.rows.case_rows: the one path into the table)."""
    return pd.DataFrame([asdict(r) for o in outcomes for r in case_rows(o, run_id="").rows])


def gated_regressions(run: pd.DataFrame, baseline: pd.DataFrame, backend: str | None) -> list[dict[str, Any]]:
    """The rows of `run` that `harness compare` gates on by default against `baseline` (compared
    on the run's cases only: a case the run has not reached yet is not MISSING), in run order."""
    from reports.compare import compare_frames
    from reports.gate import gated

    if run.empty:
        return []
    base = baseline[baseline["case_id"].isin(set(run["case_id"]))]
    comparison = compare_frames(run, base, run_name="run", baseline_name="baseline", backend=backend)
    hit = {(v.tier, v.case_id, v.stage): v for v in gated(comparison)}
    out = []
    for r in run.to_dict("records"):
        v = hit.get((r["tier"], r["case_id"], r["stage"]))
        if v is not None:
            out.append(
                {
                    "case_id": r["case_id"],
                    "stage": r["stage"],
                    "status": r["status"],
                    "reason": _text(r.get("reason"))[:300],
                    "failing_op": _text(r.get("failing_op")) or None,
                    "verdict": v.verdict.value,
                    "detail": v.detail[:300],
                }
            )
    return out


def _may_regress(outcome: CaseOutcome) -> bool:
    """Could compare gate a row of this case? Not when every stage passes without a fallback (its
    verdict is PASS or IMPROVED whatever the baseline): such cases skip the comparison."""
    if outcome.fallback_count or outcome.fallback_ops:
        return True
    for st in outcome.stages:
        metrics = st.get("metrics") or {}
        if st.get("status") != "pass" or metrics.get("fallback_ops") or metrics.get("fallback_count"):
            return True
    return False


def _text(value: Any) -> str:
    return "" if value is None or value != value else str(value)  # None / NaN (a frame's missing value)


@dataclass
class StopAtRegressions:
    """Counts regressing cases as outcomes land; `reached` once `maxfail` of them were seen."""

    baseline_rows: pd.DataFrame
    maxfail: int
    baseline: str = ""
    backend: str | None = None
    regressions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return len({r["case_id"] for r in self.regressions})

    @property
    def reached(self) -> bool:
        return self.cases >= self.maxfail

    def add(self, outcomes: Iterable[CaseOutcome]) -> bool:
        """Record the regressions among `outcomes`; True once the limit is reached."""
        suspects = [o for o in outcomes if _may_regress(o)]
        if suspects:
            self.regressions.extend(
                gated_regressions(outcome_frame(suspects), self.baseline_rows, self.backend)
            )
        return self.reached

    def summary(self, not_run: int) -> dict[str, Any]:
        """The `stopped` entry of the run's summary (None-free, JSON-able)."""
        return {
            "maxfail": self.maxfail,
            "baseline": self.baseline,
            "regressing_cases": self.cases,
            "regressions": self.regressions,
            "not_run": not_run,
        }
