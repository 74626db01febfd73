"""Unit-tier throughput: N registry cases replayed on a backend by W worker processes.

Each worker takes chunks of cases and replays them with `registry.unit_tier.execute_many`, as the
runner's process pool does (one process per chunk, not per case). Wall time includes starting the
workers (importing torch, transformers and the backend) and the first call's warm-up.

    python benchmarks/unit_tier.py --registry ops.parquet --cases 10000 --workers 2 --json
    -> {"cases": 10000, "seconds": ..., "cases_per_second": ..., "statuses": {...}, ...}
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import sys
import time


def _chunk(args: tuple) -> list[str]:
    payloads, backend = args
    from registry.unit_tier import execute_many

    return [r[0].status.value for r in execute_many(payloads, backend)]


def _warm(backend: str) -> None:
    import registry.unit_tier  # noqa: F401
    from contracts.backends import get_backend

    get_backend(backend)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", help="registry Parquet (default: $HARNESS_REGISTRY or the bundled one)")
    parser.add_argument(
        "--cases",
        type=int,
        default=10_000,
        help="cases to run (default 10000; fewer if the registry has fewer)",
    )
    parser.add_argument("--backend", default="neuron")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=250, help="cases per task (default 250)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from registry.unit_tier import cases as list_cases

    t_list = time.perf_counter()
    cases = list_cases(args.registry)[: args.cases]
    list_seconds = time.perf_counter() - t_list
    payloads = [c.payload for c in cases]
    chunks = [(payloads[i : i + args.chunk], args.backend) for i in range(0, len(payloads), args.chunk)]
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.workers, initializer=_warm, initargs=(args.backend,)) as pool:
        statuses = collections.Counter(s for chunk in pool.imap_unordered(_chunk, chunks) for s in chunk)
    seconds = time.perf_counter() - t0
    result = {
        "cases": len(payloads),
        "seconds": round(seconds, 2),
        "cases_per_second": round(len(payloads) / seconds, 1) if seconds else None,
        "statuses": dict(sorted(statuses.items())),
        "backend": args.backend,
        "workers": args.workers,
        "listing_seconds": round(list_seconds, 2),
        "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(
            f"{result['cases']} cases in {result['seconds']} s = {result['cases_per_second']} cases/s "
            f"on {args.backend} with {args.workers} workers; {result['statuses']}",
            file=sys.stdout,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
