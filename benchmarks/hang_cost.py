"""What a hanging op and a crashing op cost a night: the quick nightly clean, with one planted hang
and with one planted crash, side by side.

    python benchmarks/hang_cost.py [--hang cumsum-long-hang] [--crash index-float-crash] [--rounds 1]
                                   [--out WORKDIR] [--json]

A first clean quick nightly is the baseline every timed night compares with and learns its
per-case limits from (harness.engine.limits), as yesterday's night is for tonight's; then, per
round, the clean night, the night with the hang fault and the night with the crash fault (both
from backend/faults/suite.yaml, planted through NEURON_FAULTS) run one after the other with the
same settings. Printed per night: wall seconds (nightly.json), per tier, the dead rows (timeout,
crash) and how many of them name the planted op as their root cause (route call_journal), the
ops the night marked and the cases it ran alone; and the ratios hang / clean, crash / clean
(the target: <= 2). With --rounds N the medians of the N rounds are compared. `--json` prints one
object (`nights`, `ratios`, `target`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TARGET = 2.0


def suite_fault(name: str) -> dict[str, Any]:
    suite = yaml.safe_load((ROOT / "backend" / "faults" / "suite.yaml").read_text())
    for fault in suite["faults"]:
        if fault["name"] == name:
            return fault
    raise SystemExit(f"hang_cost: no fault {name!r} in backend/faults/suite.yaml")


def nightly(out: Path, baseline: Path | None, fault: dict[str, Any] | None) -> dict[str, Any]:
    """One `harness nightly --quick` into `out` (with the fault planted); its JSON and wall time.
    A night already done in `out` (its JSON beside it) is read back, not run again."""
    done = out.with_suffix(".json")
    if done.is_file():
        return json.loads(done.read_text())
    env = dict(os.environ)
    env.pop("NEURON_FAULTS", None)
    log = out.with_suffix(".fired.jsonl")
    if fault is not None:
        path = out.with_suffix(".faults.yaml")
        path.write_text(yaml.safe_dump({"version": 1, "faults": [fault]}))
        env["NEURON_FAULTS"] = str(path)
        env["NEURON_FAULT_LOG"] = str(log)
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "nightly",
        "--quick",
        "--out",
        str(out),
        "--json",
        "--no-progress",
    ]
    cmd += ["--baseline", str(baseline)] if baseline else ["--no-baseline"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"hang_cost: nightly into {out} printed no JSON:\n{proc.stderr[-3000:]}") from None
    fired = sorted(
        {json.loads(line)["op"] for line in log.read_text().splitlines()} if log.exists() else set()
    )
    night = {"result": result, "wall_seconds": round(wall, 1), "fired": fired}
    done.write_text(json.dumps(night))
    return night


def anatomy(out: Path, night: dict[str, Any], fault: dict[str, Any] | None) -> dict[str, Any]:
    """Per tier: wall seconds, dead rows, those whose root cause names the planted op, the marks."""
    import pandas as pd

    planted = str(fault["op"]) if fault else None
    tiers: dict[str, Any] = {}
    for name, summary in (night["result"].get("tiers") or {}).items():
        entry: dict[str, Any] = {"seconds": summary.get("wall_seconds"), "error": summary.get("error")}
        results = out / name / "results.parquet"
        if results.is_file():
            df = pd.read_parquet(results)
            dead = df[df.status.isin(["timeout", "crash"])]
            cases = dead.drop_duplicates("case_id")
            named = [bool(planted) and _same_op(str(op or ""), planted) for op in cases.root_cause_op]
            entry.update(
                dead_cases=len(cases),
                dead_by_status=cases.status.value_counts().to_dict(),
                named_planted_op=sum(named),
                backend_blamed=int((cases.blame == "backend").sum()),
                journal_seconds=_diagnosis_seconds(out / name),
            )
        run = out / name / "run.json"
        if run.is_file():
            meta = json.loads(run.read_text())["tiers"].get(name, {})
            limits = meta.get("limits") or {}
            entry.update(marked_ops=limits.get("marked_ops"), alone=limits.get("alone"))
            entry["reference_seconds"] = (meta.get("timings") or {}).get("reference_seconds")
        tiers[name] = entry
    return tiers


def _same_op(found: str, planted: str) -> bool:
    """A root cause names the planted op: its overload, or an overload of the planted packet."""
    return found == planted or found.startswith(planted + ".")


def _diagnosis_seconds(run_dir: Path) -> float:
    """Seconds of the dead cases' root-cause search (the journaled runs' records)."""
    total = 0.0
    journal = run_dir / "journal.jsonl"
    if not journal.is_file():
        return 0.0
    for line in journal.read_text().splitlines():
        stages = json.loads(line)["outcome"]["stages"]
        rc = stages[0].get("root_cause") if stages else None
        if rc and rc.get("route") == "call_journal":
            total += float(rc.get("seconds") or 0.0)
    return round(total, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hang", default="cumsum-long-hang", help="a hang fault of the suite")
    ap.add_argument("--crash", default="index-float-crash", help="a crash fault of the suite")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", help="work directory (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.out or tempfile.mkdtemp(prefix="hang-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    faults = {"clean": None, "hang": suite_fault(args.hang), "crash": suite_fault(args.crash)}
    base = work / "baseline"
    if not (base / "nightly.json").is_file():
        print(f"baseline: clean quick nightly into {base}", file=sys.stderr)
        nightly(base, None, None)
    nights: dict[str, list[dict[str, Any]]] = {k: [] for k in faults}
    for r in range(args.rounds):
        for name, fault in faults.items():  # side by side: the three nights of a round back to back
            out = work / f"{name}-{r}"
            print(f"round {r + 1}: {name} night into {out}", file=sys.stderr)
            night = nightly(out, base, fault)
            nights[name].append(
                {
                    "seconds": night["result"].get("seconds"),
                    "wall_seconds": night["wall_seconds"],
                    "fault": fault,
                    "fired_ops": night["fired"],
                    "tiers": anatomy(out, night, fault),
                    "dir": str(out),
                }
            )
    median = {k: statistics.median(n["seconds"] for n in v) for k, v in nights.items()}
    ratios = {k: round(median[k] / median["clean"], 2) for k in ("hang", "crash")}
    report = {
        "nights": nights,
        "median_seconds": median,
        "ratios": ratios,
        "target": TARGET,
        "met": {k: v <= TARGET for k, v in ratios.items()},
        "work": str(work),
    }
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for name, runs in nights.items():
            last = runs[-1]
            print(f"{name}: {median[name]:.0f} s (median of {len(runs)}), fired in {last['fired_ops']}")
            for tier, t in last["tiers"].items():
                print(
                    f"  {tier:<15} {t.get('seconds') or 0:>7.1f} s  dead {t.get('dead_cases', 0):>3}  "
                    f"naming the planted op {t.get('named_planted_op', 0):>3}  alone {t.get('alone')}"
                )
        print(f"ratios (target <= {TARGET}): hang {ratios['hang']}, crash {ratios['crash']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
