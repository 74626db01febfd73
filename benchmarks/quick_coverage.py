"""What the quick nightly's subsets exercise: the share of the registry's ops (and (op, dtype)
pairs, trait values) each limited tier covers, chosen for coverage versus taken by position.

The limits are the quick nightly's (harness/data/nightly.toml [quick]); the selections are the
tiers' own listings (`cases()` with the limit, as the runner calls them), so the figures are those
of `harness nightly --quick`. "by position" is the plain alternative they are compared with:
the unit tier's heaviest cases, the selection's first representatives, the full tier's most
downloaded architectures (a stable hash for the catalog's ties).

    python benchmarks/quick_coverage.py --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time


def unit(limit: int, registry: str | None) -> dict:
    from registry.unit_tier import cases, op_dtype

    listed = cases(registry)
    ops = {c.payload["op"] for c in listed}
    pairs = {op_dtype(c) for c in listed}
    heaviest = sorted(sorted(listed, key=lambda c: c.case_id), key=lambda c: -c.weight)[:limit]  # by position

    def share(subset):
        return {
            "ops": len({c.payload["op"] for c in subset}),
            "ops_share": len({c.payload["op"] for c in subset}) / len(ops),
            "op_dtypes": len({op_dtype(c) for c in subset}),
            "op_dtypes_share": len({op_dtype(c) for c in subset}) / len(pairs),
        }

    return {
        "limit": limit,
        "registry_cases": len(listed),
        "registry_ops": len(ops),
        "registry_op_dtypes": len(pairs),
        "coverage_order": share(listed[:limit]),
        "by_position": share(heaviest),
    }


def representative(limit: int, registry: str | None) -> dict:
    from agents.select import default_representatives
    from contracts.tiers import TierInputs
    from harness.tiers.quick_subset import subset_coverage
    from harness.tiers.representative import RepresentativeTier

    population = default_representatives()
    chosen = [
        c.spec()
        for c in RepresentativeTier().cases(TierInputs(registry=registry, options={"limit": limit}))[:limit]
    ]
    return {
        "limit": limit,
        "models": [s.model_id for s in chosen],
        "coverage_order": subset_coverage(chosen, population, registry),
        "by_position": subset_coverage(population[:limit], population, registry),
    }


def full(limit: int, registry: str | None, workers: int) -> dict:
    from contracts.tiers import TierInputs
    from harness.tiers.full import FullTier
    from harness.tiers.population import load_population
    from harness.tiers.quick_subset import subset_coverage

    members = [m for m in load_population(None) if m.spec is not None]
    population = [m.spec for m in members]
    chosen = [
        c.spec()
        for c in FullTier().cases(
            TierInputs(registry=registry, options={"limit": limit, "workers": workers})
        )[:limit]
    ]
    by_hash = sorted(population, key=lambda s: hashlib.sha1(s.model_id.encode()).hexdigest())[:limit]
    return {
        "limit": limit,
        "architectures": [s.model_id for s in chosen],
        "coverage_order": subset_coverage(chosen, population, registry),
        "by_position": subset_coverage(by_hash, population, registry),
    }


def main(argv: list[str] | None = None) -> int:
    from harness.engine.nightly import load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", help="registry Parquet (default: $HARNESS_REGISTRY or the bundled one)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    quick = load_config(True)
    t0 = time.perf_counter()
    out = {
        "unit": unit(quick.tier("unit").limit, args.registry),
        "representative": representative(quick.tier("representative").limit, args.registry),
        "full": full(quick.tier("full").limit, args.registry, args.workers),
    }
    out["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(out))
        return 0
    for tier in ("unit", "representative", "full"):
        t = out[tier]
        c, p = t["coverage_order"], t["by_position"]
        print(
            f"{tier:15} limit {t['limit']:5}: coverage order {c['ops_share']:.1%} of the registry's ops "
            f"(by position {p['ops_share']:.1%})",
            file=sys.stdout,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
