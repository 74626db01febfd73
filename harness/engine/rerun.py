"""The runner's re-run on the reference backend of device cases no worker could blame.

Model tiers blame in the worker (harness.blame.probe: the same process re-runs a failed stage on
the CPU). Two kinds of outcome cannot be blamed there: a case whose worker died (timeout, crash,
memory limit: nothing is left to re-run in), and a failing row of a tier plug-in that has no
judge of its own. The runner re-runs those cases on the reference backend in fresh workers after
the tier, journals the reference outcomes in RUNDIR/reference/journal.jsonl (so a restart does
not re-run them) and blames each row by the same case's reference outcome (harness.blame.rules).
The reference run only blames: a case that dies there too is not re-run under the call journal,
and the op a device death was localized to (route call_journal) stays on a row only when the row
is blamed on the backend (a case that hangs on the CPU too is not the device's hang).

    refs = reference_pass(tier, opts, journal, cases, run_dir)   # {case_id: CaseOutcome}
"""

from __future__ import annotations

import copy
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from contracts.records import Case, CaseOutcome
from contracts.settings import resolve_limits
from contracts.status import Blame
from contracts.tiers import Tier, tier_option
from harness.blame import rules as blame
from harness.engine.journal import Journal

REFERENCE_DIR = "reference"
JOURNAL_ROUTE = "call_journal"  # contracts.rootcause.ROUTES: the worker-death records made here


def reference_journal(run_dir: str | Path) -> Journal:
    return Journal(Path(run_dir) / REFERENCE_DIR)


def reference_outcomes(run_dir: str | Path, tier: str | None = None) -> dict[tuple[str, str], CaseOutcome]:
    """Journaled reference outcomes of a run directory, keyed by (tier, case_id)."""
    if not (Path(run_dir) / REFERENCE_DIR).exists():
        return {}
    with reference_journal(run_dir) as j:
        return {(r["tier"], r["case_id"]): CaseOutcome.from_dict(r["outcome"]) for r in j.records(tier)}


def reference_pass(
    tier: Tier, opts: Any, journal: Journal, cases: list[Case], run_dir: Path
) -> dict[str, Any]:
    """Re-run on the reference the cases of `tier` that need it; returns bookkeeping for run.json."""
    from harness.engine.executors import make_executor

    if blame.is_reference(opts.backend) or not tier_option(tier, "reference_rerun"):
        return {}  # a tier may opt out (`reference_rerun = False`): its dead cases stay blamed by rule
    by_id = {c.case_id: c for c in cases}
    need = [
        by_id[r["case_id"]]
        for r in journal.records(tier.name)
        if r["case_id"] in by_id and blame.needs_reference(CaseOutcome.from_dict(r["outcome"]), opts.backend)
    ]
    ref_journal = reference_journal(run_dir)
    try:
        done = ref_journal.done(tier.name)
        todo = [c for c in need if c.case_id not in done]
        if todo:
            reference = blame.reference_backend()
            timeout, max_cases = resolve_limits(tier, opts.limits.timeout, opts.limits.max_cases)
            # the reference run only blames: a death there is not localized
            limits = replace(opts.limits, timeout=timeout, max_cases=max_cases, diagnose=False)
            executor = make_executor(
                opts.executor,
                opts.tier,
                reference,
                opts.workers,
                limits,
                log_dir=run_dir / REFERENCE_DIR / "workers",
                ray_address=opts.ray_address,
                sys_path=list(sys.path),
            )
            if opts.progress:
                print(
                    f"{tier.name}: re-running {len(todo)} case(s) on the reference backend {reference} "
                    "to blame them",
                    file=sys.stderr,
                )

            def on_results(outcomes: list[CaseOutcome]) -> None:
                ref_journal.append_many(
                    {"tier": o.tier, "case_id": o.case_id, "outcome": o.to_dict()} for o in outcomes
                )

            executor.run([([c], False) for c in todo], on_results)
    finally:
        ref_journal.close()
    return {"reference_cases": len(need), "reference_ran": len(todo) if need else 0}


def blamed(
    record: dict[str, Any], backend: str | None, references: dict[tuple[str, str], CaseOutcome]
) -> CaseOutcome:
    """A journal record's outcome with every stage that does not pass blamed."""
    out = CaseOutcome.from_dict(copy.deepcopy(record["outcome"]))
    ref = references.get((out.tier, out.case_id))
    note = "" if ref is not None else "the case was not re-run on the reference"
    blame.complete_outcome(out, backend, reference=ref, reference_note=note)
    for st in out.stages:  # a death's call is a root cause only of a backend failure
        rc = st.get("root_cause") or {}
        if rc.get("route") == JOURNAL_ROUTE and st.get("blame") != Blame.BACKEND.value:
            st.pop("root_cause")
    return out
