"""Representative-tier throughput with 1 and 2 workers, side by side in one run.

    python benchmarks/tier_scaling.py [--models 8] [--backend neuron] [--json]

Runs the first N representative models (every stage) through `harness.engine.runner.run_tier` with one
worker, then with two, on the same case list (listed once), and prints models per minute and the
ratio. Each run gets its own empty NEFF cache. Target: speedup_2_workers >= 1.7 on a 2-core machine.
Worker start-up (importing torch and transformers) is part of the measured time, as it is in a real
run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits


def measure(n_models: int, backend: str, workdir: Path, timeout: float) -> dict:
    base = RunOptions(
        tier="representative",
        out=workdir / "w1",
        backend=backend,
        limit=n_models,
        workers=1,
        limits=WorkerLimits(timeout=timeout, max_cases=10_000),
        progress=False,
    )
    t0 = time.perf_counter()
    from contracts.tiers import load_tier
    from harness.engine.runner import list_cases

    (workdir / "w1").mkdir(parents=True)
    cases = list_cases(load_tier("representative"), base, workdir / "w1")  # listed once, saved in w1
    list_seconds = time.perf_counter() - t0
    out = {"models": len(cases), "backend": backend, "list_seconds": round(list_seconds, 2)}
    for workers in (1, 2):
        run_dir = workdir / f"w{workers}"
        if workers != 1:
            run_dir.mkdir(parents=True)
            for f in (workdir / "w1").glob("cases-*.json"):
                shutil.copy(f, run_dir / f.name)
        # each run starts from an empty NEFF cache: the second must not reuse the first's compiles
        os.environ["NEURON_CACHE_DIR"] = str(workdir / f"neff-{workers}")
        os.environ.pop("NEURON_SHARED_CACHE_DIR", None)
        opts = RunOptions(**{**base.__dict__, "out": run_dir, "workers": workers})
        t = time.perf_counter()
        summary = run_tier(opts)
        seconds = time.perf_counter() - t
        out[f"seconds_{workers}_worker{'s' if workers > 1 else ''}"] = round(seconds, 2)
        out[f"models_per_minute_{workers}_worker{'s' if workers > 1 else ''}"] = round(
            60 * len(cases) / seconds, 2
        )
        out[f"counts_{workers}"] = summary["counts"]
    out["speedup_2_workers"] = round(
        out["models_per_minute_2_workers"] / out["models_per_minute_1_worker"], 3
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=8, help="representative models to run (default 8)")
    p.add_argument("--backend", default="neuron")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="tier-scaling-"))
    try:
        out = measure(args.models, args.backend, workdir, args.timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['models']} representative models on {out['backend']}:")
        print(f"  1 worker : {out['models_per_minute_1_worker']:.1f} models/min ({out['seconds_1_worker']}s)")
        print(
            f"  2 workers: {out['models_per_minute_2_workers']:.1f} models/min ({out['seconds_2_workers']}s)"
        )
        print(f"  speedup_2_workers = {out['speedup_2_workers']:.2f}x (target >= 1.7x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
