"""`harness cache`: inspect, empty or pre-fill the NEFF compile cache of the neuron backend.

Examples:
    harness cache stats                 # entries and bytes per level, hit/compile counters
    harness cache stats --json
    harness cache clear                 # the local disk cache (NEURON_CACHE_DIR)
    harness cache clear --shared        # also the shared cache (NEURON_SHARED_CACHE_DIR)
    harness cache warm bert             # compile a model's graphs once, like neuron_parallel_compile
    harness cache warm path/to/config.json --architecture LlamaForCausalLM --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

HELP = "Inspect, clear or warm the neuron NEFF compile cache (memory, disk, shared)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "examples:" + __doc__.split("Examples:", 1)[1]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    stats = sub.add_parser("stats", help="entries, bytes and counters of each cache level")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    clear = sub.add_parser("clear", help="remove every cached artifact of the local disk cache")
    clear.add_argument("--shared", action="store_true", help="also empty the shared cache")
    clear.add_argument("--json", action="store_true", help="print one JSON object")
    warm = sub.add_parser("warm", help="run a model's compile stage once so its graphs are cached")
    warm.add_argument(
        "model",
        metavar="MODEL",
        help="a model type (e.g. bert), a config.json path, or a Hub id with --snapshot",
    )
    warm.add_argument(
        "--architecture", default="", help="transformers class to build (default: the base model)"
    )
    warm.add_argument("--snapshot", help="snapshot JSONL/Parquet dump to resolve a Hub id")
    warm.add_argument("--json", action="store_true", help="print one JSON object")


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _print_stats(stats: dict[str, Any]) -> None:
    print(f"cache dir   {stats['cache_dir']}")
    print(f"disk        {stats['disk']['entries']} artifacts, {_human_bytes(stats['disk']['bytes'])}")
    shared = stats["shared"]
    if shared is None:
        print("shared      (none: set NEURON_SHARED_CACHE_DIR)")
    elif "error" in shared:
        print(f"shared      {shared['location']}: unreadable ({shared['error']})")
    else:
        print(
            f"shared      {shared['location']}: {shared['entries']} artifacts, "
            f"{_human_bytes(shared['bytes'])}"
        )
    c = stats["cumulative"]
    print(
        f"since clear {c['compiles']} compiles ({c['compile_seconds']:.2f} s), "
        f"hits: memory {c['hits_memory']}, "
        f"disk {c['hits_disk']}, shared {c['hits_shared']}; corrupt removed {c['corrupt_removed']}, "
        f"compile failures {c['compile_failures']}"
    )


def _warm(args: argparse.Namespace) -> dict[str, Any]:
    from backend.cache import get_cache
    from harness.cli.check import resolve_target
    from harness.stages.check import check_model

    spec = resolve_target(args.model, architecture=args.architecture, snapshot=args.snapshot)
    before = get_cache().counters.to_dict()
    start = time.perf_counter()
    result = check_model(spec, backend="neuron", stages=["compile"])
    after = get_cache().counters.to_dict()
    stage = result.stages.get("compile")
    return {
        "model": spec.model_id,
        "architecture": result.architecture or spec.architecture,
        "status": stage.status.value if stage else "not_attempted",
        "reason": stage.reason if stage else "",
        "seconds": round(time.perf_counter() - start, 3),
        "compiles": after["compiles"] - before["compiles"],
        "hits": {lvl: after[f"hits_{lvl}"] - before[f"hits_{lvl}"] for lvl in ("memory", "disk", "shared")},
        "cache_dir": str(get_cache().config.disk_dir),
    }


def run(args: argparse.Namespace) -> int:
    import torch  # noqa: F401  (loads the neuron device through its entry point)

    from backend.cache import get_cache

    if args.action == "stats":
        stats = get_cache().stats()
        print(json.dumps(stats)) if args.json else _print_stats(stats)
        return 0
    if args.action == "clear":
        removed = get_cache().clear(shared=args.shared)
        if args.json:
            print(json.dumps({"removed": removed}))
        else:
            print(", ".join(f"{level}: {n} artifacts removed" for level, n in removed.items()))
        return 0
    try:
        out = _warm(args)
    except LookupError as exc:
        print(f"harness cache warm: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out))
    else:
        why = f" - {out['reason']}" if out["reason"] else ""
        print(
            f"{out['model']} ({out['architecture']}): compile {out['status']}{why}; "
            f"{out['compiles']} new compiles, hits {out['hits']} in {out['seconds']:.1f} s "
            f"-> {out['cache_dir']}"
        )
    return 0 if out["status"] == "pass" else 1
