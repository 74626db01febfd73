"""`harness run`: run one tier (unit, representative, full, upstream) into a resumable run directory."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from contracts.settings import DEFAULT_WORKER_MEMORY

HELP = "Run one tier in isolated workers into RUNDIR (resumable; writes results.parquet)."

EPILOG = """examples:
  harness run --tier unit --registry registry.parquet --out runs/u1 --json
  harness run --tier representative --out runs/r1 --workers 2
  harness run --tier full --out runs/f1                                  # the offline catalog
  harness run --tier full --models crawl/ --shard 2/4 --out runs/f1-2    # a crawl store, shard 2 of 4
  harness run --tier full --models ../shared/data/hub/hub_models.jsonl.gz --out runs/hub
  harness run --tier full --executor ray --ray-address ray://head:10001 --workers 64 --out runs/f1
  harness run --tier upstream --ops 'add,nn.functional.*' --dtypes float32,bfloat16 --out runs/up1
  harness run --tier upstream --shard 1/2 --out runs/up-1                # op_db x every CPU dtype, half of it
  harness run --tier mypkg.tiers:SMOKE --out runs/s1                     # a tier plug-in MODULE:ATTR

  harness run --tier unit --baseline nightly/ --exitfirst --out runs/u2   # stop at the first regression

Run the same command again with the same --out to continue a run that was killed: finished cases
are kept (RUNDIR/journal.jsonl), the rest run, nothing runs twice. Exit code 0 when the run
completed (failing cases are results, not errors; gate on them with `harness compare`), 1 when
--maxfail/--exitfirst stopped it at regressions against the baseline, 2 on bad input.
"""


def parse_bytes(text: str) -> int | None:
    """'8G', '512M', '1.5GiB', '123456' -> bytes; '0' or 'none' -> no limit."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    if t in ("", "0", "none", "off"):
        return None
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    mult = units.get(t[-1], 1)
    number = t[:-1] if t[-1] in units else t
    try:
        return int(float(number) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8G, 512M)") from None


def add_common(parser: argparse.ArgumentParser) -> None:
    """Flags shared by `run` and `nightly`."""
    parser.add_argument(
        "--backend", default="neuron", metavar="B", help="neuron (default), cpu, cuda or MODULE:DEVICE"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="parallel worker processes (default: CPU count)",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local process pool (default) or Ray actors (needs the ray extra)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray instance started for the run)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds per case before the worker is killed "
        "(default per tier: unit 120, representative 900, full 300)",
    )
    parser.add_argument(
        "--memory-limit",
        type=parse_bytes,
        default=DEFAULT_WORKER_MEMORY,
        metavar="SIZE",
        help="RSS limit per worker, e.g. 8G (default), 0 for none",
    )
    parser.add_argument(
        "--max-cases-per-worker",
        type=int,
        metavar="N",
        help="recycle a worker process after N cases (default per tier: unit 20000, models 100)",
    )
    parser.add_argument(
        "--order",
        choices=("likely-failures", "listed"),
        default="likely-failures",
        help="execution order: cases that failed in the baseline first, then cases whose ops "
        "changed since it, each by download weight (default; results do not depend on it), "
        "or as the tier lists them",
    )
    parser.add_argument(
        "--shape-budget",
        type=int,
        metavar="N",
        help="unit tier: elements of a replayed case's "
        "largest tensor before it is scaled down ($HARNESS_REPLAY_MAX_NUMEL, default 262144)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def apply_shape_budget(args: argparse.Namespace) -> None:
    """--shape-budget -> $HARNESS_REPLAY_MAX_NUMEL, which the worker processes inherit."""
    if getattr(args, "shape_budget", None):
        if args.shape_budget < 1:
            raise ValueError("--shape-budget must be a positive number of elements")
        os.environ["HARNESS_REPLAY_MAX_NUMEL"] = str(args.shape_budget)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--tier",
        required=True,
        metavar="TIER",
        help="unit | representative | full | upstream | MODULE:ATTR (a tier plug-in)",
    )
    parser.add_argument("--out", required=True, metavar="RUNDIR", help="run directory (created or continued)")
    parser.add_argument(
        "--shard", metavar="I/N", help="run only shard I of N (1-based), e.g. for a CI matrix"
    )
    parser.add_argument(
        "--registry", metavar="PATH", help="unit tier: the shape registry (default: the bundled one)"
    )
    parser.add_argument(
        "--models",
        "--in",
        dest="models",
        metavar="PATH",
        help="representative: a selection dir (harness select --in); full: a crawl store dir "
        "or a snapshot .jsonl[.gz] (default: the offline catalog)",
    )
    parser.add_argument("--limit", type=int, metavar="N", help="run only the tier's first N cases")
    parser.add_argument(
        "--ops",
        metavar="PATTERN",
        help="upstream tier: OpInfo names to run, comma-separated globs "
        "matching the name or name.variant (e.g. 'add,nn.functional.*'; default: all of op_db)",
    )
    parser.add_argument(
        "--dtypes",
        metavar="LIST",
        help="upstream tier: dtypes to run, e.g. float32,bfloat16 "
        "(default: every dtype each OpInfo declares for the CPU)",
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="baseline the execution order learns from "
        "(default: $HARNESS_BASELINE_DIR, else ./baseline; none: listing order by weight)",
    )
    parser.add_argument(
        "--maxfail",
        type=int,
        metavar="N",
        help="stop after N cases that regress against the "
        "baseline (what `harness compare` gates on: a new or changed failure, a fallback regression), "
        "like pytest --maxfail; the run "
        "stays resumable and exits 1",
    )
    parser.add_argument(
        "-x",
        "--exitfirst",
        action="store_const",
        const=1,
        dest="maxfail",
        help="stop at the first regressing case (--maxfail 1)",
    )
    add_common(parser)


def limits_from(args: argparse.Namespace, tier) -> WorkerLimits:  # noqa: F821
    from contracts.settings import resolve_limits
    from harness.engine.workers import WorkerLimits

    timeout, max_cases = resolve_limits(tier, args.timeout, args.max_cases_per_worker)
    return WorkerLimits(timeout=timeout, memory_bytes=args.memory_limit, max_cases=max_cases)


def tier_options(args: argparse.Namespace) -> dict:
    """Flags a tier reads from TierInputs.options (the upstream tier's op and dtype selection)."""
    opts = {k: getattr(args, k) for k in ("ops", "dtypes") if getattr(args, k, None)}
    if opts and args.tier != "upstream" and ":" not in args.tier:
        raise ValueError(
            f"--ops/--dtypes select op_db samples: they apply to --tier upstream, not {args.tier!r}"
        )
    return opts


def run(args: argparse.Namespace) -> int:
    from contracts.tiers import load_tier
    from harness.engine.runner import RunOptions, parse_shard, run_tier
    from harness.errors import RunDirMismatch

    try:
        apply_shape_budget(args)
        shard = parse_shard(args.shard)
        tier = load_tier(args.tier)
        options = tier_options(args)
    except ValueError as exc:
        print(f"harness run: {exc}", file=sys.stderr)
        return 2
    opts = RunOptions(
        tier=args.tier,
        out=args.out,
        backend=args.backend,
        shard=shard,
        workers=args.workers,
        executor=args.executor,
        ray_address=args.ray_address,
        registry=args.registry,
        models=args.models,
        limit=args.limit,
        limits=limits_from(args, tier),
        progress=not args.no_progress,
        tier_options=options,
        order=args.order,
        baseline=args.baseline,
        maxfail=args.maxfail,
    )
    try:
        summary = run_tier(opts)
    except (RunDirMismatch, FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"harness run: {exc}", file=sys.stderr)
        return 2
    summary["repro_files"] = repro_files(args.out)
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        print(format_summary(summary))
    return 1 if summary.get("stopped") else 0


def repro_files(out: str) -> list[str]:
    """The standalone tests of the run's root causes, written to OUT/repros/ (harness.rootcause.repro)."""
    from harness.rootcause.repro import write_repros

    try:
        return write_repros(out)
    except Exception as exc:  # noqa: BLE001 - the run's tables stand; the files are said to be missing
        print(f"harness run: repro files not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return []


def format_summary(s: dict) -> str:
    counts = " ".join(f"{k}={v}" for k, v in s["counts"].items())
    lines = [
        f"{s['tier']}: {s['cases']} cases ({s['models']} models) in {s['seconds']:.1f}s: {counts}",
        f"  resumed {s['resumed']}, ran {s['ran']}; results: {s['results']}",
    ]
    for stage, c in s["by_stage"].items():
        cov = s["coverage"].get(stage, {})
        share = cov.get("weighted_share")
        w = f", download-weighted pass {share:.1%}" if share is not None else ""
        blame = s.get("by_stage_blame", {}).get(stage)
        b = (" | not passed by blame: " + " ".join(f"{k}={v}" for k, v in blame.items())) if blame else ""
        lines.append(f"  {stage:10} " + " ".join(f"{k}={v}" for k, v in c.items()) + w + b)
    if s.get("scaling"):
        sc = s["scaling"]
        lines.append(
            f"  shapes: {sc['scaled']} cases scaled down, {sc['unreplayable']} unreplayable "
            f"(budget {sc['shape_budget']} elements)"
        )
    if s.get("repro_files"):
        lines.append(f"  root-cause repros: {len(s['repro_files'])} in {Path(s['repro_files'][0]).parent}")
    if s.get("stopped"):
        st = s["stopped"]
        first = st["regressions"][0]
        lines.append(
            f"  stopped after {st['regressing_cases']} regressing case(s) against {st['baseline']} "
            f"({st['not_run']} not run; the same command continues): first {first['case_id']} "
            f"{first['stage']} {first['status']}: {first['reason'][:120]}"
        )
    return "\n".join(lines)
