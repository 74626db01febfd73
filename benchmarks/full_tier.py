"""The full tier (load, forward, backward) over a whole population, with its coverage.

    python benchmarks/full_tier.py --population catalog [--workers 2] [--json]
    python benchmarks/full_tier.py --population hub     # ../shared/data/hub/hub_models.jsonl.gz
    python benchmarks/full_tier.py --population PATH    # a crawl store dir or snapshot file

Targets on a 2-core machine: the offline catalog (every type x class pair) in < 30 min, the real
61,603-model Hub population in < 60 min. Prints the wall time split into listing (population +
deduplication) and running, the distinct architectures actually run, and coverage per stage both
by models and weighted by downloads. `--out DIR` keeps the run directory (resumable).
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

from contracts.settings import current
from contracts.tiers import load_tier
from harness.engine.runner import RunOptions, list_cases, run_tier
from harness.engine.workers import WorkerLimits

ROOT = Path(__file__).resolve().parent.parent
HUB = current().shared_data / "hub" / "hub_models.jsonl.gz"


def measure(
    population: str, workers: int, out: Path, backend: str, timeout: float, limit: int | None
) -> dict:
    models = None if population == "catalog" else str(HUB if population == "hub" else population)
    if models and not Path(models).exists():
        raise SystemExit(f"population {models} not found")
    opts = RunOptions(
        tier="full",
        out=out,
        backend=backend,
        models=models,
        workers=workers,
        limit=limit,
        limits=WorkerLimits(timeout=timeout),
        progress=sys.stderr.isatty(),
    )
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cases = list_cases(load_tier("full"), opts, out)
    list_seconds = time.perf_counter() - t0
    summary = run_tier(opts)
    total = time.perf_counter() - t0
    runnable = [c for c in cases if not c.payload.get("not_attempted")]
    return {
        "population": population,
        "backend": backend,
        "workers": workers,
        "models": sum(len(c.model_ids) for c in cases),
        "cases": len(cases),
        "distinct_architectures": len(runnable),
        "runnable_models": sum(len(c.model_ids) for c in runnable),
        "list_seconds": round(list_seconds, 1),
        "run_seconds": round(total - list_seconds, 1),
        "seconds": round(total, 1),
        "minutes": round(total / 60, 2),
        "resumed": summary["resumed"],
        "counts": summary["counts"],
        "by_stage": summary["by_stage"],
        "coverage": {
            stage: {
                "models_pass": c["models_pass"],
                "models_total": c["models_total"],
                "models_share": round(c["models_pass"] / c["models_total"], 4) if c["models_total"] else None,
                "download_weighted_share": None
                if c["weighted_share"] is None
                else round(c["weighted_share"], 4),
            }
            for stage, c in summary["coverage"].items()
        },
        "usable": usable_figures(out),
        "load_average": os.getloadavg(),
        "run_dir": str(out),
    }


def usable_figures(run_dir: Path) -> dict:
    """Over the models with a usable config (the cases that were run, not the population's
    not-attempted records): the share of downloads (and models) whose forward and backward pass
    (backward may be skipped as not applicable), and every other one by the blame of the first stage
    that stopped it."""
    from collections import defaultdict

    from reports.tables import read_results

    df = read_results(run_dir)
    df = df[~df["case_id"].str.startswith("not_attempted/")]
    totals = {"models": 0, "weight": 0.0}
    passed = {"models": 0, "weight": 0.0}
    by_blame: dict[str, dict[str, float]] = defaultdict(lambda: {"models": 0, "weight": 0.0, "cases": 0})
    for _, g in df.groupby("case_id", sort=False):
        st = {r.stage: r for r in g.itertuples()}
        n, w = int(g["n_models"].iloc[0] or 0), float(g["weight"].iloc[0] or 0.0)
        totals["models"] += n
        totals["weight"] += w
        ok = all(
            s in st and (st[s].status == "pass" or (s == "backward" and st[s].status == "skipped"))
            for s in ("load", "forward", "backward")
        )
        if ok:
            passed["models"] += n
            passed["weight"] += w
            continue
        first = next(st[s] for s in ("load", "forward", "backward") if s in st and st[s].status != "pass")
        blame = first.blame if isinstance(first.blame, str) and first.blame else "none"
        by_blame[blame]["models"] += n
        by_blame[blame]["weight"] += w
        by_blame[blame]["cases"] += 1
    excluded = sum(by_blame[b]["weight"] for b in ("upstream", "environment") if b in by_blame)
    return {
        "models": totals["models"],
        "downloads": totals["weight"],
        "computes_models": passed["models"],
        "computes_downloads": passed["weight"],
        "computes_download_share": round(passed["weight"] / totals["weight"], 4)
        if totals["weight"]
        else None,
        "computes_download_share_not_upstream_environment": round(
            passed["weight"] / (totals["weight"] - excluded), 4
        )
        if totals["weight"] - excluded
        else None,
        "not_computing_by_blame": {
            b: {k: (round(v, 1) if k == "weight" else int(v)) for k, v in d.items()}
            for b, d in sorted(by_blame.items())
        },
    }


def list_only(population: str, workers: int) -> dict:
    """Just the listing: population read + deduplication (what the run then costs is per case)."""
    from harness.tiers.population import dedupe_cases, load_population

    models = None if population == "catalog" else str(HUB if population == "hub" else population)
    t0 = time.perf_counter()
    members = load_population(models)
    t1 = time.perf_counter()
    cases = dedupe_cases(members, workers=workers)
    t2 = time.perf_counter()
    runnable = [c for c in cases if not c.payload.get("not_attempted")]
    weight = sum(c.weight for c in cases)
    return {
        "population": population,
        "models": len(members),
        "cases": len(cases),
        "distinct_architectures": len(runnable),
        "runnable_models": sum(len(c.model_ids) for c in runnable),
        "runnable_download_share": round(sum(c.weight for c in runnable) / weight, 4) if weight else None,
        "not_attempted": {
            c.case_id.split("/", 1)[1]: len(c.model_ids) for c in cases if c.payload.get("not_attempted")
        },
        "read_seconds": round(t1 - t0, 1),
        "dedupe_seconds": round(t2 - t1, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--population", default="catalog", help="catalog | hub | PATH (default catalog)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--backend", default="neuron")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--limit", type=int, help="only the first N cases (a smoke run, not the benchmark)")
    p.add_argument("--out", help="keep the run directory here (default: a temp dir, removed)")
    p.add_argument("--list-only", action="store_true", help="only read and deduplicate the population")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.list_only:
        print(json.dumps(list_only(args.population, args.workers)))
        return 0
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="full-tier-")) / "run"
    try:
        res = measure(args.population, args.workers, out, args.backend, args.timeout, args.limit)
    finally:
        if not args.out:
            shutil.rmtree(out.parent, ignore_errors=True)
    if args.json:
        print(json.dumps(res))
    else:
        print(
            f"full tier over {res['population']}: {res['models']} models -> {res['distinct_architectures']} "
            f"distinct architectures in {res['minutes']} min (listing {res['list_seconds']}s)"
        )
        for stage, c in res["coverage"].items():
            print(
                f"  {stage:9} {c['models_pass']}/{c['models_total']} models pass "
                f"({c['models_share']:.1%}); download-weighted {c['download_weighted_share']}"
            )
        u = res["usable"]
        print(
            f"  usable configs: forward+backward pass for {u['computes_models']}/{u['models']} models, "
            f"{u['computes_download_share']:.1%} of their downloads "
            f"({u['computes_download_share_not_upstream_environment']:.1%} without upstream/environment); "
            f"the rest by blame: {u['not_computing_by_blame']}; load average {res['load_average']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
