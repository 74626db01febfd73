"""Stop a run at its first regressions against a baseline (`harness run --maxfail N`, `--exitfirst`).

Why: a CI job that checks a change wants the first sign that it broke something, not the whole
tier first (pytest's -x / --maxfail). A *regression* is a (case, stage) row that passes in the
baseline and does not pass now; a case that already failed in the baseline, or that the baseline
never ran, is no regression. After the N-th regressing case no new chunk is dispatched; chunks
already running finish and are journaled, so the run directory stays a valid, resumable run:
the same command again continues with the cases not yet run (and stops at the next regression).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from contracts.records import CaseOutcome
from contracts.status import Status


def passing_rows(path: str | Path, tier: str) -> set[tuple[str, str]]:
    """(case_id, stage) rows of `tier` that pass in the baseline's results tables (a baseline dir,
    a run dir or a nightly dir, as ordering reads them). Raises ValueError when there are none to
    compare with: stopping at regressions against nothing would stop at nothing, silently."""
    import pyarrow.parquet as pq

    root = Path(path)
    dirs = [root] if (root / "results.parquet").is_file() else sorted(
        d for d in root.iterdir() if (d / "results.parquet").is_file()) if root.is_dir() else []
    rows: set[tuple[str, str]] = set()
    seen_tier = False
    for d in dirs:
        table = pq.read_table(d / "results.parquet", columns=["tier", "case_id", "stage", "status"]).to_pylist()
        for r in table:
            if r["tier"] != tier:
                continue
            seen_tier = True
            if r["status"] == Status.PASS.value:
                rows.add((r["case_id"], r["stage"]))
    if not seen_tier:
        raise ValueError(f"--maxfail/--exitfirst: the baseline {root} has no results of tier {tier!r} "
                         "to compare with")
    return rows


@dataclass
class StopAtRegressions:
    """Counts regressing cases as outcomes land; `reached` once `maxfail` of them were seen."""

    passing: set[tuple[str, str]]
    maxfail: int
    baseline: str = ""
    regressions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return len({r["case_id"] for r in self.regressions})

    @property
    def reached(self) -> bool:
        return self.cases >= self.maxfail

    def add(self, outcomes: Iterable[CaseOutcome]) -> bool:
        """Record the regressions among `outcomes`; True once the limit is reached."""
        for o in outcomes:
            for st in o.stages:
                if (o.case_id, st["stage"]) in self.passing and st["status"] != Status.PASS.value:
                    self.regressions.append({"case_id": o.case_id, "stage": st["stage"], "status": st["status"],
                                             "reason": (st.get("reason") or "")[:300],
                                             "failing_op": st.get("failing_op") or None})
        return self.reached

    def summary(self, not_run: int) -> dict[str, Any]:
        """The `stopped` entry of the run's summary (None-free, JSON-able)."""
        return {"maxfail": self.maxfail, "baseline": self.baseline, "regressing_cases": self.cases,
                "regressions": self.regressions, "not_run": not_run}
