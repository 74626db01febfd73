"""Build a run's report: the HTML page, JUnit XML per tier and failure_groups.json, from its tables.

    from reports.build import build_report
    build_report("runs/2026-11-29")     # compares with $HARNESS_BASELINE_DIR or ./baseline if present

`harness report` and `harness nightly` call this; it reads only the run directory (and the
baseline), so it runs anywhere the Parquet files are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def build_report(
    rundir: str | Path,
    baseline: str | Path | None = None,
    use_baseline: bool = True,
    history: int = 10,
    out: str | Path | None = None,
    gate: str = "backend",
) -> dict[str, Any]:
    """Write the HTML report and JUnit files; return what was written (the --json object)."""
    from reports import baseline as baselines
    from reports.compare import compare_runs
    from reports.coverage import summarize
    from reports.gate import counts as blame_counts
    from reports.gate import gated
    from reports.html import write_report
    from reports.junit import write_junit
    from reports.rootcauses import root_cause_groups, unexplained
    from reports.tables import read_results, read_table

    rundir = Path(rundir)
    comparison, note = None, "Comparison with a baseline switched off."
    if use_baseline:
        where = baselines.baseline_dir(baseline)
        if baselines.exists(where):
            comparison = compare_runs(rundir, where, gate=gate)
        else:
            note = f"No baseline at {where}: make one with `harness baseline update {rundir}`."
    results = read_results(rundir)
    cov = summarize(results, read_table(rundir, "per_op"), read_table(rundir, "fallbacks"))
    causes = root_cause_groups(results)
    groups = _failure_groups(rundir, results, causes)
    html = write_report(
        rundir,
        comparison,
        note,
        history=history,
        out=out,
        coverage=cov,
        failure_groups=groups,
        results=results,
        root_cause_groups=causes,
    )
    junit = write_junit(results, rundir)
    return {
        "report_html": str(html),
        "junit": {t: str(p) for t, p in junit.items()},
        "run_ids": cov.run_ids,
        "baseline": comparison.baseline if comparison else None,
        "new_failures": comparison.counts["FAIL"] if comparison else None,
        "gate": gate,
        "gated_failures": len(gated(comparison, gate)) if comparison else None,
        "new_failures_by_blame": blame_counts(comparison) if comparison else None,
        "backend_failures": cov.backend_failures_total,
        "failure_groups": groups.get("file"),
        "root_causes": [
            {
                "op": g.op,
                "phase": g.phase,
                "rows": g.rows,
                "cases": len(g.cases),
                "models": g.models,
                "repro": g.repro,
                "repro_verified": g.repro_verified,
            }
            for g in causes
        ],
        "unexplained_failures": sum(u.rows for u in unexplained(results)),
        "levels": [
            {
                "tier": lv.tier,
                "level": lv.level,
                "models": lv.models,
                "models_reached": lv.models_reached,
                "cases": lv.cases,
                "cases_reached": lv.cases_reached,
                "weight": lv.weight,
                "weight_reached": lv.weight_reached,
            }
            for lv in cov.levels
        ],
    }


def _failure_groups(rundir: Path, results, causes) -> dict[str, Any]:
    """RUNDIR/failure_groups.json (reports.failure_groups); a problem there never stops the report."""
    from reports.failure_groups import write_failure_groups

    try:
        return write_failure_groups(rundir, results, root_cause_groups=causes)
    except Exception as exc:  # noqa: BLE001 - the report is still written, with the reason shown
        return {
            "file": None,
            "groups": [],
            "failures": 0,
            "llm": False,
            "note": f"failure groups not computed: {type(exc).__name__}: {exc}"[:300],
        }
