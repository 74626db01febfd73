"""Traits + representative selection over 100,000 configs (target: under 30 s on this machine).

The population is the real 61,603-model snapshot (../shared/data/hub/hub_models.jsonl.gz) read
through the snapshot source (agents.snapshot, no config instantiation), scaled up to --n rows by
resampling rows with a fixed seed and suffixing their ids (``<id>#dup<k>``): duplicated rows keep
their config, so they are as cheap as real fine-tunes sharing a base config are.

Measured side by side in one process:
  cold  - empty type-profile cache (every model_type's default config built from transformers)
  warm  - profile cache on disk from the cold run, in-memory memo cleared
Prints a table, or with --json one object with `configs` and `seconds` (the cold traits+selection
wall time, the worst case) plus the parts, process CPU times and ratios. The cold run's cost is
mostly importing ~250 transformers configuration modules (and torch, which some of them import).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from contracts.settings import current  # noqa: E402

DEFAULT_POPULATION = current().shared_data / "hub" / "hub_models.jsonl.gz"
TARGET_SECONDS = 30.0


def load_population(path: Path, n: int, seed: int):
    import pandas as pd

    from agents.snapshot import iter_snapshot
    from agents.store import records_to_table

    base = records_to_table(iter_snapshot(path, instantiate=False)).to_pandas()
    if n <= len(base):
        return base.head(n).reset_index(drop=True), len(base)
    extra = base.sample(n=n - len(base), replace=True, random_state=seed).reset_index(drop=True)
    extra["id"] = [f"{i}#dup{k}" for k, i in enumerate(extra["id"])]
    return pd.concat([base, extra], ignore_index=True), len(base)


def run_once(frame):
    from agents.classify import traits_frame
    from agents.select import select

    c0, t0 = time.process_time(), time.perf_counter()
    traits = traits_frame(frame, with_store_columns=True)
    t1 = time.perf_counter()
    sel = select(traits)
    t2, c2 = time.perf_counter(), time.process_time()
    return t1 - t0, t2 - t1, c2 - c0, sel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--population", type=Path, default=DEFAULT_POPULATION)
    ap.add_argument("--n", type=int, default=100_000, help="configs to classify and select from")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not args.population.exists():
        print(f"population {args.population} not found (needs ../shared/data)", file=sys.stderr)
        return 2

    cache = tempfile.mkdtemp(prefix="select-scale-cache-")
    os.environ["HARNESS_CACHE_DIR"] = cache
    try:
        return _measure(args)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _measure(args: argparse.Namespace) -> int:
    t = time.perf_counter()
    import transformers  # noqa: F401 - import cost reported apart from the work

    from agents import traits as traits_mod

    t_import = time.perf_counter() - t
    t = time.perf_counter()
    frame, real = load_population(args.population, args.n, args.seed)
    t_load = time.perf_counter() - t

    traits_mod.reset_profiles()
    cold_traits, cold_select, cold_cpu, sel = run_once(frame)
    traits_mod.reset_profiles()  # keeps the on-disk profiles, drops every in-memory memo
    warm_traits, warm_select, warm_cpu, sel2 = run_once(frame)
    assert [r.id for r in sel.representatives] == [r.id for r in sel2.representatives], (
        "selection not deterministic"
    )

    unique_inputs = frame[["model_type", "config", "config_level"]].astype(str).drop_duplicates().shape[0]
    cold = cold_traits + cold_select
    warm = warm_traits + warm_select
    result = {
        "configs": len(frame),
        "seconds": round(cold, 2),
        "seconds_warm": round(warm, 2),
        "cpu_seconds_cold": round(
            cold_cpu, 2
        ),  # process CPU time: the figure a shared, busy machine distorts least
        "cpu_seconds_warm": round(warm_cpu, 2),
        "traits_seconds_cold": round(cold_traits, 2),
        "select_seconds_cold": round(cold_select, 2),
        "traits_seconds_warm": round(warm_traits, 2),
        "select_seconds_warm": round(warm_select, 2),
        "cold_over_warm": round(cold / warm, 2) if warm else None,
        "cold_over_target": round(cold / TARGET_SECONDS, 3),
        "target_seconds": TARGET_SECONDS,
        "real_models": real,
        "duplicated_rows": int(max(0, len(frame) - real)),
        "unique_inputs": int(unique_inputs),
        "model_types": int(frame["model_type"].nunique()),
        "usable": sel.eligible,
        "representatives": len(sel.representatives),
        "universe": sel.universe,
        "download_weighted_coverage": round(sel.download_weighted_coverage, 4),
        "import_seconds": round(t_import, 2),
        "load_seconds": round(t_load, 2),
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['configs']:,} configs ({real:,} real + {result['duplicated_rows']:,} resampled "
            "with suffixed ids; "
            f"{result['unique_inputs']:,} distinct inputs)"
        )
        print(f"{'':8}{'traits s':>10}{'select s':>10}{'total s':>10}{'cpu s':>10}")
        print(f"{'cold':8}{cold_traits:10.2f}{cold_select:10.2f}{cold:10.2f}{cold_cpu:10.2f}")
        print(f"{'warm':8}{warm_traits:10.2f}{warm_select:10.2f}{warm:10.2f}{warm_cpu:10.2f}")
        print(
            f"cold/warm {result['cold_over_warm']}x; "
            f"cold / {TARGET_SECONDS:.0f} s target = {result['cold_over_target']}"
        )
        print(
            f"{result['representatives']} representatives cover {result['universe']} values+pairs; "
            f"download-weighted coverage {result['download_weighted_coverage']:.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
