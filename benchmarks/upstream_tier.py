"""The upstream tier end to end: the whole op_db x every CPU dtype on a backend with W workers.

Runs `harness run --tier upstream` (the runner, its isolated workers, journal and Parquet tables)
and prints cases, seconds (listing apart), the breakdown by status and skip reason, crashes, and
agreement per dtype class: of the forward samples the CPU can run, the share the device ran and
matched (target >= 99% for float32 in exact mode), natively or through a CPU fallback. The
precision mode defaults to exact (NEURON_PRECISION=exact in the workers), as the target asks.

    python benchmarks/upstream_tier.py --workers 2 --json                  # the whole tier
    python benchmarks/upstream_tier.py --ops 'add,nn.functional.*' --dtypes float32 --out /tmp/up
    python benchmarks/upstream_tier.py --cold ...                          # list op_db again (no cache)

A second run into the same --out only finishes what is missing (the runner resumes); use a new
--out (the default is a fresh temporary directory) to time a whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_SECONDS = 20 * 60
TARGET_FLOAT32 = 0.99


def measure(
    ops: str | None,
    dtypes: str | None,
    workers: int,
    out: str | None,
    backend: str = "neuron",
    precision: str = "exact",
    cold: bool = False,
    progress: bool = True,
) -> dict:
    from harness.engine.runner import RunOptions, run_tier
    from reports.tables import read_results
    from reports.upstream import summarize

    if precision:
        os.environ["NEURON_PRECISION"] = precision  # the workers inherit it
    if cold:
        os.environ["HARNESS_CACHE_DIR"] = tempfile.mkdtemp(prefix="upstream-cold-")
    run_dir = out or tempfile.mkdtemp(prefix="upstream-tier-")
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    options = {k: v for k, v in (("ops", ops), ("dtypes", dtypes)) if v}
    summary = run_tier(
        RunOptions(
            tier="upstream",
            out=run_dir,
            backend=backend,
            workers=workers,
            progress=progress,
            tier_options=options,
        )
    )
    seconds = time.perf_counter() - t0
    load_after = os.getloadavg()
    up = summarize(read_results(run_dir))
    agreement = {a["dtypes"]: a for a in up.agreement}
    f32 = agreement.get("float32", {})
    return {
        "cases": summary["cases"],
        "results": up.breakdown["results"],
        "seconds": round(seconds, 1),
        "list_seconds": summary["list_seconds"],
        "run_seconds": round(seconds - summary["list_seconds"], 1),
        "cases_per_second": round(summary["cases"] / max(seconds - summary["list_seconds"], 1e-9), 1),
        "workers": workers,
        "backend": backend,
        "precision": precision,
        "run_dir": str(run_dir),
        "breakdown": up.breakdown,
        "by_stage": up.by_stage,
        "crashed_cases": int(summary["counts"].get("crash", 0)),
        "agreement": agreement,
        "float32_agreement": f32.get("agreement"),
        "float32_agreement_excluding_unsupported": f32.get("agreement_excluding_unsupported"),
        "target_seconds": TARGET_SECONDS,
        "seconds_over_target": round(seconds / TARGET_SECONDS, 3),
        "target_float32_agreement": TARGET_FLOAT32,
        "worst_ops": up.worst_ops[:15],
        "cpu_count": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="OpInfo name globs, comma-separated (default: all of op_db)")
    parser.add_argument(
        "--dtypes", help="dtypes, comma-separated (default: every CPU dtype each OpInfo declares)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="neuron")
    parser.add_argument(
        "--precision",
        default="exact",
        help="NEURON_PRECISION for the run (default exact; '' keeps the environment's)",
    )
    parser.add_argument("--out", help="run directory (default: a new temporary directory)")
    parser.add_argument(
        "--cold", action="store_true", help="list op_db again instead of using the listing cache"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    r = measure(
        args.ops,
        args.dtypes,
        args.workers,
        args.out,
        args.backend,
        args.precision,
        args.cold,
        progress=not args.json,
    )
    if args.json:
        print(json.dumps(r, default=str))
        return 0
    b = r["breakdown"]
    print(
        f"{r['cases']} cases, {r['results']} results in {r['seconds']} s "
        f"(listing {r['list_seconds']} s) with "
        f"{r['workers']} workers; target {TARGET_SECONDS} s -> x{r['seconds_over_target']}"
    )
    print(
        f"  pass {b['pass']}, failing {b['failing']}, skipped {b['skipped']} {b['skipped_by_reason']}, "
        f"not attempted {b['not_attempted']}; crashed cases {r['crashed_cases']}"
    )
    for label, a in r["agreement"].items():
        print(
            f"  {label:10} agree {a['agree']}/{a['cpu_can_run']} = {a['agreement']}, "
            f"natively {a['native_share']}, "
            f"unsupported {a['backend_unsupported']}, failing {a['failing']}"
        )
    print(f"  load average before {r['load_average_before']}, after {r['load_average_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
