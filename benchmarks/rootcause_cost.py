"""What localization costs: nothing on a clean device, the search and the repro on a faulted one.

    python benchmarks/rootcause_cost.py [--models bert:BertForMaskedLM,gpt2:GPT2LMHeadModel]
                                        [--rounds 3] [--stages load,forward,backward,numerics] [--json]

Side by side in one process, interleaved round by round (the order alternating) so the machine's
load falls on both alike: the check with blame only (`harness.blame.probe.check_with_blame`) and
with blame and localization (`harness.rootcause.localize.check_with_root_cause`, what the model
tiers run), on a clean device.
Their ratio is the clean night's overhead (target: 1.0 within noise; no row is blamed on the
backend, so nothing is localized), and the hook's own cost per clean check, timed alone (10,000
calls on a checked model). Then, with `--fault` planted (through NEURON_FAULTS, as in a
faulted night), the localization of each backend-blamed row: its seconds (search + repro
verification, the first of which starts the worker's verifier) and what it named.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _timed(fn, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__)
    p.add_argument("--models", default="bert:BertForMaskedLM,gpt2:GPT2LMHeadModel")
    p.add_argument("--stages", default="load,forward,backward,numerics")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument(
        "--fault",
        default='{"name": "gelu-1pct", "op": "aten.gelu.default", "kind": "perturb", "rel": 0.01}',
        help="the fault planted for the faulted half (JSON, the fault file format)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from contracts.records import ModelSpec
    from harness.blame.probe import check_with_blame
    from harness.rootcause.localize import check_with_root_cause

    specs = []
    for item in args.models.split(","):
        model_type, _, arch = item.strip().partition(":")
        specs.append(ModelSpec(f"catalog/{model_type}", model_type, arch))
    stages = args.stages.split(",")
    for spec in specs:  # warm: imports and first builds are no part of either side
        check_with_blame(spec, "neuron", stages)
    blame_only, with_rc, localized_clean = [], [], 0
    for n in range(args.rounds):
        for spec in specs:
            sides = [(check_with_blame, blame_only), (check_with_root_cause, with_rc)]
            for fn, times in sides if n % 2 == 0 else sides[::-1]:
                seconds, result = _timed(fn, spec, "neuron", stages)
                times.append(seconds)
                if fn is check_with_root_cause:
                    localized_clean += sum(1 for r in result.stages.values() if r.root_cause)
    # what the localization hook itself costs a check whose rows are not blamed on the backend
    from harness.rootcause.localize import localize_run
    from harness.stages.check import check_model

    box: dict = {}
    check_model(specs[0], "neuron", stages, judge=lambda run, wanted: box.setdefault("run", (run, wanted)))
    run, wanted = box["run"]
    t0 = time.perf_counter()
    for _ in range(10_000):
        localize_run(run, wanted)
    hook_us = (time.perf_counter() - t0) / 10_000 * 1e6
    clean = {
        "hook_microseconds_per_clean_check": round(hook_us, 2),
        "blame_only_seconds": round(sum(blame_only), 2),
        "with_root_cause_seconds": round(sum(with_rc), 2),
        "ratio": round(sum(with_rc) / sum(blame_only), 3),
        "median_ratio": round(statistics.median(with_rc) / statistics.median(blame_only), 3),
        "rows_localized": localized_clean,
        "checks": len(with_rc),
    }

    from backend import faults

    fault = json.loads(args.fault)
    path = Path(tempfile.mkdtemp(prefix="rootcause-cost-")) / "fault.yaml"
    path.write_text(json.dumps({"version": 1, "faults": [fault]}))
    os.environ["NEURON_FAULTS"] = str(path)  # the verifier's process plants it too
    faults.load(path)
    rows = []
    try:
        for spec in specs:
            result = check_with_root_cause(spec, "neuron", stages)
            for name, r in result.stages.items():
                if r.root_cause:
                    rc = r.root_cause
                    rows.append(
                        {
                            "model": spec.model_id,
                            "stage": name,
                            "found": rc["found"],
                            "op": rc.get("op"),
                            "route": rc.get("route"),
                            "seconds": rc.get("seconds"),
                            "repro_verified": rc.get("repro_verified"),
                        }
                    )
    finally:
        faults.clear()
        os.environ.pop("NEURON_FAULTS", None)
    seconds = [r["seconds"] for r in rows if r["seconds"] is not None]
    summary = {
        "clean": clean,
        "faulted": {
            "fault": fault,
            "rows": rows,
            "median_localization_seconds": round(statistics.median(seconds), 2) if seconds else None,
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"clean: {clean['checks']} checks, blame only {clean['blame_only_seconds']} s, with "
            f"localization {clean['with_root_cause_seconds']} s: ratio {clean['ratio']}; "
            f"rows localized {clean['rows_localized']}"
        )
        for r in rows:
            print(
                f"faulted: {r['model']} [{r['stage']}] {r['op']} via {r['route']} in {r['seconds']} s, "
                f"repro verified {r['repro_verified']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
