"""`harness nightly`: every tier of the nightly (harness/data/nightly.toml), then the HTML report and
the comparison with the baseline."""

from __future__ import annotations

import argparse
import json
import sys

from harness.cli.run import add_common

HELP = (
    "Run the unit, representative, full and upstream tiers into DIR, write the report, "
    "compare with the baseline."
)

EPILOG = """examples:
  harness nightly --quick --out runs/quick            # bundled defaults, < 10 min on 2 cores
  harness nightly --out runs/$(date +%F) --models crawl/ --baseline baseline/
  harness nightly --out runs/n1 --executor ray --ray-address auto --workers 64

DIR/<tier>/ is a resumable run directory per tier; DIR/report.html the static report; DIR/junit-*.xml
for CI. Rerun the same command to continue a killed night. Exit code 1 when the comparison with
the baseline finds new failures or a tier could not run; 0 otherwise.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small, fast subset of each tier (harness/data/nightly.toml [quick])",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="nightly directory (created or continued)"
    )
    parser.add_argument("--registry", metavar="PATH", help="unit tier registry (default: the bundled one)")
    parser.add_argument(
        "--representatives",
        metavar="DIR",
        help="representative tier selection dir "
        "(default: selected from the --models crawl, else the offline catalog's representatives)",
    )
    parser.add_argument(
        "--models",
        "--in",
        dest="models",
        metavar="PATH",
        help="full tier population (and, for a "
        "crawl store dir, where the representatives are selected from): a crawl "
        "store dir or a snapshot .jsonl[.gz] (default: the offline catalog)",
    )
    parser.add_argument(
        "--baseline", metavar="DIR", help="baseline (default: $HARNESS_BASELINE_DIR, else ./baseline)"
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the comparison (and order cases without the baseline's failures and fingerprints)",
    )
    parser.add_argument(
        "--config", metavar="TOML", help="nightly settings (default: the bundled nightly.toml)"
    )
    add_common(parser)


def run(args: argparse.Namespace) -> int:
    from harness.cli.run import apply_shape_budget
    from harness.engine.nightly import NightlyOptions, run_nightly
    from harness.engine.workers import WorkerLimits

    try:
        apply_shape_budget(args)
    except ValueError as exc:
        print(f"harness nightly: {exc}", file=sys.stderr)
        return 2

    opts = NightlyOptions(
        out=args.out,
        quick=args.quick,
        backend=args.backend,
        workers=args.workers,
        executor=args.executor,
        ray_address=args.ray_address,
        registry=args.registry,
        representatives=args.representatives,
        models=args.models,
        baseline=args.baseline,
        use_baseline=not args.no_baseline,
        timeout=args.timeout,
        max_cases=args.max_cases_per_worker,
        limits=WorkerLimits(memory_bytes=args.memory_limit),
        progress=not args.no_progress,
        config_path=args.config,
        order=args.order,
    )
    try:
        result = run_nightly(opts)
    except ValueError as exc:
        print(f"harness nightly: {exc}", file=sys.stderr)
        return 2
    from harness.cli.run import repro_files

    result["repro_files"] = repro_files(args.out)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        from harness.cli.run import format_summary

        for name, summary in result["tiers"].items():
            print(
                f"{name}: could not run: {summary['error']}"
                if "error" in summary
                else format_summary(summary)
            )
        if result.get("new_failures") is not None:
            print(
                f"new failures vs baseline {result['baseline']}: {result['new_failures']} "
                f"({result.get('gated_failures')} gate: blamed on the backend or not judged; by blame "
                f"{result.get('new_failures_by_blame')})"
            )
        if result.get("report_html"):
            print(f"HTML report: {result['report_html']}")
        else:
            print(f"report not written: {result.get('report_error')}")
    return int(result["exit_code"])
