"""`harness compare RUN BASELINE`: each case PASS / FAIL / XFAIL / IMPROVED / MISSING / FLAKY /
FALLBACK_REGRESSION."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "Compare a run with a baseline; exit code 1 on new failures."

EPILOG = """examples:
  harness compare runs/today baseline
  harness compare runs/today baseline --json > compare.json
  harness compare runs/today baseline --expectations my_expectations.yaml --time-threshold 1.0

verdicts: PASS, FAIL (new failure, or a changed failure: another error class or failing op than in
the baseline), XFAIL (known: reports/data/expectations.yaml or failing the same way in the
baseline), IMPROVED, MISSING (in the baseline, not in the run), FLAKY (reports/data/flaky.yaml),
FALLBACK_REGRESSION (same status, but a new CPU-fallback op or a higher fallback count; gates).
root cause: each new failure names the op call its row was localized to (op, phase, route, repro;
`root_cause` in --json), or why none was found.
gate: by default only regressions blamed on the backend (or not judged) fail the comparison; new
failures blamed on the harness are listed as its own debt, upstream/environment ones listed too.
--gate all fails on every new failure.
exit codes: 0 nothing gates, 1 a gated new failure (or, with --strict, MISSING/IMPROVED), 2 bad input.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("run", metavar="RUN", help="run directory")
    parser.add_argument(
        "baseline",
        metavar="BASELINE",
        nargs="?",
        help="baseline directory (default: $HARNESS_BASELINE_DIR, else ./baseline)",
    )
    parser.add_argument(
        "--expectations", metavar="YAML", help="known failures (default: the checked-in file)"
    )
    parser.add_argument("--flaky", metavar="YAML", help="flaky cases (default: the checked-in file)")
    parser.add_argument(
        "--time-threshold",
        type=float,
        metavar="REL",
        help="relative stage-time change to report (default from reports/data/metrics.yaml)",
    )
    parser.add_argument("--strict", action="store_true", help="also fail on MISSING and IMPROVED cases")
    parser.add_argument(
        "--gate",
        choices=("backend", "all"),
        default="backend",
        help="which new failures fail the comparison: backend (default: blamed on the backend "
        "or not judged) or all (also the harness', upstream and environment ones)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _print_text(result) -> None:
    from contracts.status import Verdict

    counts = result.counts
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    _print_gate(result)
    for verdict, title in (
        (Verdict.IMPROVED, "improved"),
        (Verdict.MISSING, "missing"),
        (Verdict.FLAKY, "flaky"),
    ):
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
    if counts["IMPROVED"] or counts["FAIL"] or counts["FALLBACK_REGRESSION"]:
        print(f"\nif the changes are intended, update the baseline: {result.update_command}")


def _print_gate(result) -> None:
    """New failures, gated ones first (the backend's), then the harness' own debt and the rest."""
    from reports import gate

    shown = gate.gated(result, result.gate)
    groups = [(f"new failures that gate (--gate {result.gate})", shown)]
    ids = {id(v) for v in shown}
    for blame, title in (
        ("harness", "new failures blamed on the harness (its own debt, not gated)"),
        ("upstream", "new failures blamed on upstream (transformers itself, not gated)"),
        ("environment", "new failures blamed on the environment (not gated)"),
    ):
        groups.append((title, [v for v in gate.by_blame(result)[blame] if id(v) not in ids]))
    for title, rows in groups:
        if rows:
            print(f"\n{title} ({len(rows)}):")
            for v in rows[:50]:
                blame = v.blame or "none"
                print(f"  {v.verdict.value:8} {v.tier}/{v.case_id} [{v.stage}] [blame: {blame}] {v.detail}")
                if v.root_cause:
                    print(f"           root cause: {_root_cause_line(v)}")
            if len(rows) > 50:
                print(f"  ... {len(rows) - 50} more (--json for all)")


def _root_cause_line(v) -> str:
    """The verdict's root cause in one line; the stage it was found on when that is another one."""
    from contracts.rootcause import RootCause
    from reports.rootcauses import describe

    text = describe(RootCause.from_dict(v.root_cause)).removeprefix("no root cause: ")
    if not v.root_cause.get("found"):
        text = f"none found: {text}"
    if v.root_cause_stage and v.root_cause_stage != v.stage:
        text += f" [found on {v.root_cause_stage}, which stopped this stage]"
    return text


def run(args: argparse.Namespace) -> int:
    from reports import baseline as baselines
    from reports.compare import compare_runs
    from reports.expectations import load_expectations, load_flaky

    base = baselines.baseline_dir(args.baseline)
    try:
        result = compare_runs(
            args.run,
            base,
            expectations=load_expectations(args.expectations),
            flaky=load_flaky(args.flaky),
            time_threshold=args.time_threshold,
            gate=args.gate,
        )
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
