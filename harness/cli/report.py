"""`harness report RUNDIR`: the static HTML report and JUnit XML per tier of a run."""

from __future__ import annotations

import argparse
import json
import sys

HELP = (
    "Write RUNDIR/report.html (static, opens offline), JUnit XML per tier and RUNDIR/failure_groups.json "
    "from a run's Parquet tables."
)

EPILOG = """examples:
  harness report runs/2026-11-29                  # compares with $HARNESS_BASELINE_DIR or ./baseline
  harness report runs/2026-11-29 --baseline ci/baseline --json
  harness report runs/2026-11-29 --no-baseline --history 30
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "rundir", metavar="RUNDIR", help="run directory (or a nightly dir with one subdir per tier)"
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="baseline to list new failures against "
        "(default: $HARNESS_BASELINE_DIR, else ./baseline, when it exists)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="do not compare with a baseline")
    parser.add_argument(
        "--history", type=int, default=10, metavar="N", help="runs in the trend plot (default 10)"
    )
    parser.add_argument("--out", metavar="FILE", help="HTML path (default RUNDIR/report.html)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    try:
        from reports.build import build_report

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
