"""`harness compare RUN BASELINE`: each case PASS / FAIL / XFAIL / IMPROVED / MISSING / FLAKY."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "Compare a run with a baseline; exit code 1 on new failures."

EPILOG = """examples:
  harness compare runs/today baseline
  harness compare runs/today baseline --json > compare.json
  harness compare runs/today baseline --expectations my_expectations.yaml --time-threshold 1.0

verdicts: PASS, FAIL (new failure), XFAIL (known: reports/data/expectations.yaml or failing in the
baseline too), IMPROVED, MISSING (in the baseline, not in the run), FLAKY (reports/data/flaky.yaml).
exit codes: 0 no new failure, 1 new failures (or, with --strict, MISSING/IMPROVED), 2 bad input.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("run", metavar="RUN", help="run directory")
    parser.add_argument("baseline", metavar="BASELINE", nargs="?",
                        help="baseline directory (default: $HARNESS_BASELINE_DIR, else ./baseline)")
    parser.add_argument("--expectations", metavar="YAML", help="known failures (default: the checked-in file)")
    parser.add_argument("--flaky", metavar="YAML", help="flaky cases (default: the checked-in file)")
    parser.add_argument("--time-threshold", type=float, metavar="REL",
                        help="relative stage-time change to report (default from reports/data/metrics.yaml)")
    parser.add_argument("--strict", action="store_true", help="also fail on MISSING and IMPROVED cases")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _print_text(result) -> None:
    from contracts.status import Verdict

    counts = result.counts
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    for verdict, title in ((Verdict.FAIL, "new failures"), (Verdict.IMPROVED, "improved"),
                           (Verdict.MISSING, "missing"), (Verdict.FLAKY, "flaky")):
        rows = result.of(verdict)
        if rows:
            print(f"\n{title} ({len(rows)}):")
            for v in rows[:50]:
                print(f"  {verdict.value:8} {v.tier}/{v.case_id} [{v.stage}] {v.detail}")
            if len(rows) > 50:
                print(f"  ... {len(rows) - 50} more (--json for all)")
    worse = [m for m in result.metrics if m.direction == "worse"]
    if worse:
        print(f"\nmetrics worse ({len(worse)}):")
        for m in worse[:30]:
            print(f"  {m.tier}/{m.case_id} [{m.stage}] {m.metric}: {m.baseline:g} -> {m.current:g}")
    if counts["IMPROVED"] or counts["FAIL"]:
        print(f"\nif the changes are intended, update the baseline: {result.update_command}")


def run(args: argparse.Namespace) -> int:
    from reports import baseline as baselines
    from reports.compare import compare_runs, load_expectations, load_flaky

    base = baselines.baseline_dir(args.baseline)
    try:
        result = compare_runs(args.run, base, expectations=load_expectations(args.expectations),
                              flaky=load_flaky(args.flaky), time_threshold=args.time_threshold)
    except (FileNotFoundError, ValueError) as exc:
        print(f"harness compare: {exc}", file=sys.stderr)
        return 2
    code = result.exit_code
    if args.strict and (result.counts["MISSING"] or result.counts["IMPROVED"]):
        code = 1
    if args.json:
        out = result.to_dict()
        out["exit_code"] = code
        print(json.dumps(out, default=str))
    else:
        _print_text(result)
    return code
