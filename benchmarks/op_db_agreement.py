"""Agreement of the `neuron` device with CPU on PyTorch's own per-op samples (op_db), float32, exact mode.

A thin wrapper over the upstream tier (benchmarks/upstream_tier.py, registry/upstream/): the tier
runs every op_db OpInfo's float32 samples on CPU (twice: a reference that is not deterministic
is set apart) and on the device (NEURON_PRECISION=exact) in isolated workers, so no op can kill
the benchmark (a crash is a row). The figure is the share of the forward samples CPU can run
that also run on the device and match, natively or through a CPU fallback (target >= 99%); the
samples of ops PyTorch itself does not compare across devices (test_compare_cpu skips) are not in
the denominator.

    python benchmarks/op_db_agreement.py [--json] [--ops add,mm] [--workers 2] [--out RUNDIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from upstream_tier import TARGET_FLOAT32, measure


def agreement(
    ops: str | None, workers: int, out: str | None, backend: str = "neuron", progress: bool = True
) -> dict:
    r = measure(ops, "float32", workers, out, backend, "exact", progress=progress)
    a = r["agreement"].get("float32") or {}
    forward = r["by_stage"].get("forward", {}).get("by_status", {})
    return {
        "agreement": a.get("agreement"),
        # the same share without the samples of declared-unsupported features (sparse, nested, ...)
        "agreement_excluding_unsupported": a.get("agreement_excluding_unsupported"),
        "samples_cpu_ok": a.get("cpu_can_run"),
        "samples_matched": a.get("agree"),
        "samples_matched_natively": a.get("agree_native"),
        "samples_unsupported": a.get("backend_unsupported"),
        "samples_mismatched": forward.get("fail", 0),
        "samples_errored": forward.get("error", 0),
        "samples_crashed": forward.get("crash", 0) + forward.get("timeout", 0),
        "failures": r["worst_ops"],
        "precision": "exact",
        "target": TARGET_FLOAT32,
        "seconds": r["seconds"],
        "run_dir": r["run_dir"],
        "load_average_after": r["load_average_after"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--ops", help="comma-separated op_db names or globs to run (default: all)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--backend", default="neuron")
    parser.add_argument("--out", help="run directory to keep (default: a temporary one)")
    args = parser.parse_args(argv)
    result = agreement(args.ops, args.workers, args.out, args.backend, progress=not args.json)
    if args.json:
        print(json.dumps(result, default=str))
        return 0
    print(
        f"agreement: {result['agreement']} "
        f"({result['samples_matched']}/{result['samples_cpu_ok']} float32 samples "
        f"CPU can run; target {result['target']}); {result['agreement_excluding_unsupported']} without the "
        f"{result['samples_unsupported']} samples of declared-unsupported features"
    )
    print(
        f"mismatched {result['samples_mismatched']}, errored {result['samples_errored']}, crashed "
        f"{result['samples_crashed']}; natively {result['samples_matched_natively']}"
    )
    for w in result["failures"][:30]:
        print(
            f"  {w['op']}: failing {w['failing']}, fallback {w['fallback']} of {w['results']}  "
            f"{w['first_problem']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
