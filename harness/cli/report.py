"""`harness report RUNDIR`: the static HTML report and JUnit XML per tier of a run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HELP = ("Write RUNDIR/report.html (static, opens offline), JUnit XML per tier and RUNDIR/failure_groups.json "
        "from a run's Parquet tables.")

EPILOG = """examples:
  harness report runs/2026-11-29                  # compares with $HARNESS_BASELINE_DIR or ./baseline if present
  harness report runs/2026-11-29 --baseline ci/baseline --json
  harness report runs/2026-11-29 --no-baseline --history 30
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("rundir", metavar="RUNDIR", help="run directory (or a nightly dir with one subdir per tier)")
    parser.add_argument("--baseline", metavar="DIR", help="baseline to list new failures against "
                        "(default: $HARNESS_BASELINE_DIR, else ./baseline, when it exists)")
    parser.add_argument("--no-baseline", action="store_true", help="do not compare with a baseline")
    parser.add_argument("--history", type=int, default=10, metavar="N", help="runs in the trend plot (default 10)")
    parser.add_argument("--out", metavar="FILE", help="HTML path (default RUNDIR/report.html)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def build_report(rundir: str | Path, baseline: str | Path | None = None, use_baseline: bool = True,
                 history: int = 10, out: str | Path | None = None) -> dict[str, Any]:
    """Write the HTML report and JUnit files; return what was written (the --json object)."""
    from reports import baseline as baselines
    from reports.compare import compare_runs
    from reports.coverage import summarize
    from reports.html import write_report
    from reports.junit import write_junit
    from reports.tables import read_results, read_table

    rundir = Path(rundir)
    comparison, note = None, "Comparison with a baseline switched off."
    if use_baseline:
        where = baselines.baseline_dir(baseline)
        if baselines.exists(where):
            comparison = compare_runs(rundir, where)
        else:
            note = f"No baseline at {where}: make one with `harness baseline update {rundir}`."
    results = read_results(rundir)
    cov = summarize(results, read_table(rundir, "per_op"))
    groups = _failure_groups(rundir, results)
    html = write_report(rundir, comparison, note, history=history, out=out, coverage=cov, failure_groups=groups)
    junit = write_junit(results, rundir)
    return {
        "report_html": str(html), "junit": {t: str(p) for t, p in junit.items()}, "run_ids": cov.run_ids,
        "baseline": comparison.baseline if comparison else None,
        "new_failures": comparison.counts["FAIL"] if comparison else None,
        "failure_groups": groups.get("file"),
        "levels": [{"tier": lv.tier, "level": lv.level, "models": lv.models, "models_reached": lv.models_reached,
                    "cases": lv.cases, "cases_reached": lv.cases_reached, "weight": lv.weight,
                    "weight_reached": lv.weight_reached} for lv in cov.levels],
    }


def _failure_groups(rundir: Path, results) -> dict[str, Any]:
    """RUNDIR/failure_groups.json (reports.failure_groups); a problem there never stops the report."""
    from reports.failure_groups import write_failure_groups

    try:
        return write_failure_groups(rundir, results)
    except Exception as exc:  # noqa: BLE001 - the report is still written, with the reason shown
        return {"file": None, "groups": [], "failures": 0, "llm": False,
                "note": f"failure groups not computed: {type(exc).__name__}: {exc}"[:300]}


def run(args: argparse.Namespace) -> int:
    try:
        out = build_report(args.rundir, args.baseline, not args.no_baseline, args.history, args.out)
    except FileNotFoundError as exc:
        print(f"harness report: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out))
    else:
        print(out["report_html"])
        for path in out["junit"].values():
            print(path)
    return 0
