"""`harness baseline update RUN`: make a run the baseline that `harness compare` uses."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "Manage the baseline run (`update RUN` makes RUN the baseline)."

EPILOG = """examples:
  harness baseline update runs/2026-11-29                 # into $HARNESS_BASELINE_DIR, else ./baseline
  harness baseline update runs/2026-11-29 --dir ci/baseline --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("update", help="make RUN the baseline")
    up.add_argument("run", metavar="RUN", help="run directory (or a nightly dir with one subdir per tier)")
    up.add_argument(
        "--dir", metavar="DIR", help="baseline directory (default: $HARNESS_BASELINE_DIR, else ./baseline)"
    )
    up.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from reports import baseline as baselines

    try:
        dest = baselines.update(args.run, args.dir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"harness baseline: {exc}", file=sys.stderr)
        return 2
    marker = json.loads((dest / baselines.MARKER).read_text())
    if args.json:
        print(json.dumps({"baseline": str(dest), **marker}))
    else:
        print(f"baseline {dest} <- {args.run} (runs: {', '.join(marker['run_ids'])})")
    return 0
