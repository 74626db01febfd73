"""Bug-finding power: plant each fault of a suite, run the quick nightly's tiers clean and faulted.

    python benchmarks/bug_detection.py [--json] [--faults A,B] [--tiers unit,full] [--jobs 2] [--order both]

The tiers are those of `harness nightly --quick` (harness/data/nightly.toml: unit tier subset,
representative tier, full tier subset), each run with `harness run` into WORKDIR. One clean run is
made (and reused by later invocations with the same --out); then each fault of the suite
(backend/faults/suite.yaml, or --suite) is planted alone through NEURON_FAULTS in a run of its own,
--jobs of them at a time. A fault is *caught* by a tier when some (case, stage) row that passes in
the clean run does not pass in the faulted run. A control run (an empty fault file, same timeouts)
measures rows that flip without any fault; such rows never count as a detection.

Per fault: which tiers caught it, the first detecting row (case, stage, status, reason, failing
op), and the seconds from the start of the faulted nightly (tiers in nightly order) until the
first detecting case finished (issue 13's time to first detection), and whether the fault fired at
all (NEURON_FAULT_LOG). `--json` prints `faults` (per-fault records), `detected`, `per_tier`,
`missed`, plus the targets: the quick nightly catches >= 95% of the suite, the unit tier alone
>= 80% of op-level faults (every fault except compile-only and lost-lowering ones).
Faulted runs get shorter timeouts than the nightly's (--timeout-factor x the slowest clean case,
at least --min-timeout), so a planted hang costs minutes, not hours.

Ordering (issue 13): with `--order both` (the default) every fault runs twice, once with the cases
in listing order (`--order listed`: the figures above) and once likely failures first
(`--order likely-failures` with the clean run as the baseline: its failing cases first, then the
cases whose ops' fingerprints differ from the clean run's - the planted fault's op -, see
harness/ordering.py). `--json` adds `ordering`: the median time to the first detection with and
without the order over the faults both detected, their ratio (target <= 1/3) and whether the two
orders detected the same rows (they must: ordering changes no result); each fault record gets
`ordered` (its first detection with the order).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OK = "pass"
TARGET_NIGHTLY = 0.95
TARGET_UNIT_OP_LEVEL = 0.80
TARGET_ORDERED_RATIO = 1 / 3
ORDERED_DIR = "faults-ordered"


# ------------------------------------------------------------------------------------ plans

def tier_plans(tiers: list[str] | None, limits: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The quick nightly's tiers (name, limit, timeout), in nightly order, optionally a subset
    (and other case limits, for a quick look)."""
    from harness.nightly import load_config
    from harness.tiers import load_tier, tier_chunk_size

    config = load_config(quick=True)
    names = list(config.get("tiers", ["unit", "representative", "full"]))
    unknown = [t for t in tiers or [] if t not in names]
    if unknown:
        raise SystemExit(f"bug_detection: unknown tier {unknown[0]!r}; the quick nightly has {', '.join(names)}")
    plans = []
    for name in names:
        if tiers and name not in tiers:
            continue
        tier, tcfg = load_tier(name), config.get(name, {})
        limit = (limits or {}).get(name, tcfg.get("limit"))
        plans.append({"tier": name, "limit": limit, "chunk": tier_chunk_size(tier),
                      "timeout": float(tcfg.get("timeout") or getattr(tier, "timeout", None) or 600.0)})
    return plans


def run_tiers(out: Path, plans: list[dict[str, Any]], env: dict[str, str], workers: int,
              timeouts: dict[str, float], cases_from: Path | None = None, order: str = "listed",
              baseline: Path | None = None) -> dict[str, Any]:
    """Run the tiers in order with `harness run` into out/<tier>; timings in out/timing.json.

    A tier already finished in out/ (timing.json) is kept, so an interrupted benchmark resumes."""
    out.mkdir(parents=True, exist_ok=True)
    timing_path = out / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {}
    for plan in plans:
        name = plan["tier"]
        if "limit" in timing.get(name, {}) and timing[name]["limit"] != plan["limit"]:
            raise SystemExit(f"bug_detection: {out / name} was run with limit {timing[name].get('limit')}, not "
                             f"{plan['limit']}: use another --out")
        if timing.get(name, {}).get("rc") == 0:
            continue
        run_dir = out / name
        run_dir.mkdir(parents=True, exist_ok=True)
        if cases_from is not None:  # the same case list, without listing again
            for f in (cases_from / name).glob("cases-*.json"):
                shutil.copy(f, run_dir / f.name)
        cmd = [sys.executable, "-m", "harness", "run", "--tier", name, "--out", str(run_dir), "--workers",
               str(workers), "--timeout", f"{timeouts[name]:.0f}", "--no-progress", "--json", "--order", order]
        if baseline is not None:
            cmd += ["--baseline", str(baseline)]
        if plan["limit"]:
            cmd += ["--limit", str(plan["limit"])]
        start = time.time()
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        timing[name] = {"start": start, "end": time.time(), "rc": proc.returncode, "limit": plan["limit"],
                        "stderr": proc.stderr.strip().splitlines()[-3:] if proc.returncode else []}
        timing_path.write_text(json.dumps(timing, indent=1))
    return timing


# --------------------------------------------------------------------------------- results

def rows_of(run_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(case_id, stage) -> status, reason, failing op and when the case finished (journal)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    path = run_dir / "journal.jsonl"
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        for st in rec["outcome"].get("stages", []):
            rows.setdefault((rec["case_id"], st["stage"]), {
                "status": st["status"], "reason": (st.get("reason") or "")[:200],
                "failing_op": st.get("failing_op") or "", "at": float(rec.get("journaled_at", 0.0))})
    return rows


def max_case_seconds(run_dir: Path) -> float:
    worst = 0.0
    path = run_dir / "journal.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            worst = max(worst, float(json.loads(line)["outcome"].get("seconds") or 0.0))
        except (ValueError, KeyError):
            continue
    return worst


def detections(clean: dict, faulted: dict, flaky: set) -> list[dict[str, Any]]:
    """Rows that pass clean and do not pass faulted (rows that flip in the control excluded)."""
    found = []
    for key, row in clean.items():
        if row["status"] != OK or key in flaky:
            continue
        got = faulted.get(key)
        if got is not None and got["status"] != OK:
            found.append({"case_id": key[0], "stage": key[1], **got})
    return sorted(found, key=lambda d: (d["at"], d["case_id"], d["stage"]))


def fired_of(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "fired.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def analyse(fault: dict[str, Any], run_dir: Path, clean_dir: Path, plans: list, flaky: dict) -> dict[str, Any]:
    timing = json.loads((run_dir / "timing.json").read_text()) if (run_dir / "timing.json").exists() else {}
    fired = fired_of(run_dir)
    record: dict[str, Any] = {
        "name": fault["name"], "kind": fault["kind"], "category": fault.get("category", ""), "op": fault["op"],
        "scope": fault.get("scope", "both"), "description": fault.get("description", ""),
        "fired": bool(fired), "fired_in": sorted({"compiled" if f.get("compiled") else "eager" for f in fired}),
        "fired_tiers": [p["tier"] for p in plans if any(
            timing.get(p["tier"], {}).get("start", 1e30) <= f.get("time", 0) <= timing.get(p["tier"], {}).get("end", 0)
            for f in fired)],
        "caught_by": [], "tiers": {}, "first_detection_seconds": None,
    }
    offset = 0.0
    for plan in plans:
        name = plan["tier"]
        t = timing.get(name, {})
        found = detections(rows_of(clean_dir / name), rows_of(run_dir / name), flaky.get(name, set()))
        entry: dict[str, Any] = {"rows": len(found), "cases": len({d["case_id"] for d in found}),
                                 "seconds": round(t["end"] - t["start"], 1) if t else None}
        if t.get("rc"):
            entry["error"] = t.get("stderr")
        if found:
            first = found[0]
            entry["first"] = {k: first[k] for k in ("case_id", "stage", "status", "reason", "failing_op")}
            entry["first_detection_seconds"] = round(max(0.0, first["at"] - t.get("start", first["at"])), 1)
            record["caught_by"].append(name)
            if record["first_detection_seconds"] is None:
                record["first_detection_seconds"] = round(offset + entry["first_detection_seconds"], 1)
        record["tiers"][name] = entry
        if t:
            offset += t["end"] - t["start"]
    record["detected"] = bool(record["caught_by"])
    record["seconds"] = round(offset, 1)
    return record


def is_op_level(fault: dict[str, Any]) -> bool:
    """A fault a single op's replay can reveal: not compile-only, not a lost lowering."""
    return fault.get("scope", "both") != "compiled" and fault["kind"] != "fallback"


def summarize(records: list[dict[str, Any]], plans: list, faults: list[dict[str, Any]],
              quick_nightly: bool = True) -> dict[str, Any]:
    """The `--json` object; targets only when the plans are the whole quick nightly."""
    by_name = {f["name"]: f for f in faults}
    n = len(records)
    detected = [r for r in records if r["detected"]]
    per_tier = {}
    for plan in plans:
        t = plan["tier"]
        caught = [r["name"] for r in records if t in r["caught_by"]]
        per_tier[t] = {"detected": len(caught), "rate": round(len(caught) / n, 4) if n else None}
    op_level = [r for r in records if is_op_level(by_name[r["name"]])]
    unit_caught = [r for r in op_level if "unit" in r["caught_by"]]
    times = sorted(r["first_detection_seconds"] for r in detected if r["first_detection_seconds"] is not None)
    out = {
        "faults": records,
        "detected": len(detected),
        "per_tier": per_tier,
        "missed": [r["name"] for r in records if not r["detected"]],
        "n_faults": n,
        "detection_rate": round(len(detected) / n, 4) if n else None,
        "never_fired": [r["name"] for r in records if not r["fired"]],
        "unit_op_level": {"faults": len(op_level), "detected": len(unit_caught),
                          "rate": round(len(unit_caught) / len(op_level), 4) if op_level else None},
        "median_first_detection_seconds": times[len(times) // 2] if times else None,
        "tiers": [p["tier"] for p in plans],
        "limits": {p["tier"]: p["limit"] for p in plans},
    }
    if quick_nightly:
        out["targets"] = {
            "nightly_rate": {"measured": out["detection_rate"], "target": TARGET_NIGHTLY,
                             "met": bool(n) and out["detection_rate"] >= TARGET_NIGHTLY},
            "unit_op_level_rate": {"measured": out["unit_op_level"]["rate"], "target": TARGET_UNIT_OP_LEVEL,
                                   "met": bool(op_level) and out["unit_op_level"]["rate"] >= TARGET_UNIT_OP_LEVEL},
        }
    return out


# ------------------------------------------------------------------------------------- main

def _env(base: Path, fault_file: Path | None, log: Path | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.setdefault("NEURON_CACHE_DIR", str(base / "neff"))
    env.pop("NEURON_FAULTS", None)
    env.pop("NEURON_FAULT_LOG", None)
    if fault_file is not None:
        env["NEURON_FAULTS"] = str(fault_file)
    if log is not None:
        env["NEURON_FAULT_LOG"] = str(log)
    return env


def _faulted_timeouts(clean_dir: Path, plans: list, factor: float, floor: float) -> dict[str, float]:
    """Per tier: factor x the slowest clean case (x the chunk size for chunked tiers), at least
    `floor`, at most the nightly's own timeout."""
    out = {}
    for plan in plans:
        slowest = max_case_seconds(clean_dir / plan["tier"]) * plan["chunk"]
        out[plan["tier"]] = min(plan["timeout"], max(floor, factor * slowest))
    return out


def run_fault(fault: dict[str, Any] | None, label: str, base: Path, plans: list, workers: int,
              timeouts: dict[str, float], rerun: bool, order: str = "listed") -> Path:
    """One faulted nightly: listing order into faults/LABEL, likely failures first (the clean run
    as the baseline) into faults-ordered/LABEL."""
    ordered = order != "listed"
    run_dir = base / (ORDERED_DIR if ordered else "faults") / label
    if rerun and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fault_file = run_dir / "fault.yaml"
    fault_file.write_text(yaml.safe_dump({"version": 1, "faults": [fault] if fault else []}, sort_keys=False))
    run_tiers(run_dir, plans, _env(base, fault_file, run_dir / "fired.jsonl"), workers, timeouts,
              cases_from=base / "clean", order=order, baseline=base / "clean" if ordered else None)
    return run_dir


def ordering_summary(listed: list[dict[str, Any]], ordered: list[dict[str, Any]]) -> dict[str, Any]:
    """Median time to the first detection with and without the order, over faults both caught."""
    by_name = {r["name"]: r for r in ordered}
    pairs = [(r["first_detection_seconds"], by_name[r["name"]]["first_detection_seconds"]) for r in listed
             if r["name"] in by_name and r["first_detection_seconds"] is not None
             and by_name[r["name"]]["first_detection_seconds"] is not None]
    def median(xs: list[float]) -> float | None:
        xs = sorted(xs)
        if not xs:
            return None
        mid = len(xs) // 2
        return xs[mid] if len(xs) % 2 else round((xs[mid - 1] + xs[mid]) / 2, 1)
    without, with_ = median([a for a, _ in pairs]), median([b for _, b in pairs])
    ratio = round(with_ / without, 3) if with_ is not None and without else None
    differ = [r["name"] for r in listed if r["name"] in by_name and
              sorted(r["caught_by"]) != sorted(by_name[r["name"]]["caught_by"])]
    return {"faults_compared": len(pairs), "median_first_detection_seconds_listed": without,
            "median_first_detection_seconds_ordered": with_, "ordered_over_listed": ratio,
            "target": round(TARGET_ORDERED_RATIO, 4), "met": ratio is not None and ratio <= TARGET_ORDERED_RATIO,
            "detections_differ": differ}


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| fault | category | kind | op | caught by | first detection (s) | fired in |",
             "|---|---|---|---|---|---|---|"]
    for r in summary["faults"]:
        caught = ", ".join(r["caught_by"]) or "**missed**"
        first = "" if r["first_detection_seconds"] is None else f"{r['first_detection_seconds']:.0f}"
        fired = ", ".join(r["fired_tiers"]) or "never"
        if "compiled" in r["fired_in"]:
            fired += " (compiled)" if r["fired_in"] == ["compiled"] else " (eager + compiled)"
        lines.append(f"| {r['name']} | {r['category']} | {r['kind']}{' (compiled)' if r['scope'] == 'compiled' else ''}"
                     f" | `{r['op']}` | {caught} | {first} | {fired} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--suite", help="fault file (default: the bundled backend/faults/suite.yaml)")
    p.add_argument("--faults", help="comma-separated fault names to plant (default: every fault of the suite)")
    p.add_argument("--tiers", help="comma-separated subset of the quick nightly's tiers (default: all)")
    p.add_argument("--limit", action="append", default=[], metavar="TIER=N",
                   help="run only the first N cases of TIER instead of the quick nightly's limit (repeatable; "
                        "a different figure than the quick nightly's)")
    p.add_argument("--jobs", type=int, default=2, help="faulted runs at a time (default 2)")
    p.add_argument("--order", choices=("both", "listed", "likely-failures"), default="both",
                   help="faulted runs in listing order, likely failures first, or both (default; the "
                        "with/without figure of issue 13)")
    p.add_argument("--workers", type=int, default=1, help="workers per tier run (default 1)")
    p.add_argument("--out", help="work directory, kept and reused: the clean run and finished faults are "
                                 "not run again (default: a temporary directory, removed)")
    p.add_argument("--rerun", action="store_true", help="run the selected faults again even if --out has them")
    p.add_argument("--timeout-factor", type=float, default=3.0)
    p.add_argument("--min-timeout", type=float, default=60.0)
    p.add_argument("--no-control", action="store_true", help="skip the control run (no flake detection)")
    p.add_argument("--list", action="store_true", help="list the suite's faults and exit")
    p.add_argument("--markdown", action="store_true", help="print the per-fault table as Markdown")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from backend.faults import read_faults, suite_path

    suite = read_faults(args.suite or suite_path())  # validates the whole file first
    faults = [f.to_dict() for f in suite]
    if args.faults:
        wanted = [n.strip() for n in args.faults.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in {f["name"] for f in faults}]
        if unknown:
            p.error(f"--faults: no fault named {unknown[0]!r} in the suite (see --list)")
        faults = [f for f in faults if f["name"] in wanted]
    if args.list:
        for f in faults:
            print(f"{f['name']:40} {f.get('category', ''):9} {f['kind']:10} {f['op']}")
        return 0
    limits = {}
    for item in args.limit:
        tier, sep, n = item.partition("=")
        if not sep or not n.isdigit():
            p.error(f"--limit {item!r}: expected TIER=N, e.g. unit=200")
        limits[tier.strip()] = int(n)
    plans = tier_plans([t.strip() for t in args.tiers.split(",")] if args.tiers else None, limits)
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bug-detection-"))
    base.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    load_before = os.getloadavg()
    try:
        clean = run_tiers(base / "clean", plans, _env(base, None, None), args.workers,
                          {pl["tier"]: pl["timeout"] for pl in plans})
        broken = [t for t, v in clean.items() if v.get("rc")]
        if broken:
            raise SystemExit(f"bug_detection: the clean run of tier {broken[0]} failed: {clean[broken[0]]['stderr']}")
        timeouts = _faulted_timeouts(base / "clean", plans, args.timeout_factor, args.min_timeout)
        orders = ["listed", "likely-failures"] if args.order == "both" else [args.order]
        jobs = [(None, "_control", "listed")] if not args.no_control else []
        jobs += [(f, f["name"], o) for o in orders for f in faults]
        print(f"bug_detection: clean run done in {time.time() - t0:.0f}s; {len(faults)} faults, "
              f"{args.jobs} at a time; faulted timeouts {timeouts}", file=sys.stderr)
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = {pool.submit(run_fault, f, label, base, plans, args.workers, timeouts, args.rerun, o):
                       f"{label} ({o})" for f, label, o in jobs}
            for n, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                fut.result()
                print(f"bug_detection: [{n}/{len(jobs)}] {futures[fut]} done ({time.time() - t0:.0f}s)",
                      file=sys.stderr)
        flaky: dict[str, set] = {}
        control_rows: dict[str, list] = {}
        if not args.no_control:
            for plan in plans:
                t = plan["tier"]
                rows = detections(rows_of(base / "clean" / t), rows_of(base / "faults" / "_control" / t), set())
                flaky[t] = {(d["case_id"], d["stage"]) for d in rows}
                control_rows[t] = [{k: d[k] for k in ("case_id", "stage", "status", "reason")} for d in rows]
        primary = "faults" if "listed" in orders else ORDERED_DIR
        records = [analyse(f, base / primary / f["name"], base / "clean", plans, flaky) for f in faults]
        ordered = None
        if args.order == "both":
            ordered = [analyse(f, base / ORDERED_DIR / f["name"], base / "clean", plans, flaky) for f in faults]
            for r, o in zip(records, ordered):
                r["ordered"] = {k: o[k] for k in ("first_detection_seconds", "caught_by", "seconds")}
                r["ordered"]["first"] = {t: e.get("first") for t, e in o["tiers"].items() if e.get("first")}
        summary = summarize(records, plans, faults, quick_nightly=not args.tiers and not limits)
        summary["order"] = args.order
        if ordered is not None:
            summary["ordering"] = ordering_summary(records, ordered)
        clean_t = json.loads((base / "clean" / "timing.json").read_text())
        summary.update({
            "control": control_rows if not args.no_control else None,
            "clean_seconds": {t: round(v["end"] - v["start"], 1) for t, v in clean_t.items()},
            "faulted_timeouts": timeouts, "jobs": args.jobs, "workers": args.workers,
            "wall_seconds": round(time.time() - t0, 1),
            "load_average": {"before": [round(x, 2) for x in load_before],
                             "after": [round(x, 2) for x in os.getloadavg()]},
            "workdir": str(base) if args.out else None,
        })
        if args.out:
            (base / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    finally:
        if not args.out:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(summary, default=str))
    elif args.markdown:
        print(markdown(summary))
    else:
        print(markdown(summary))
        rate = summary["detection_rate"]
        print(f"\ncaught {summary['detected']} / {summary['n_faults']} faults"
              + (f" ({rate:.0%})" if rate is not None else "")
              + "; per tier: " + ", ".join(f"{t} {v['detected']}" for t, v in summary["per_tier"].items()))
        u = summary["unit_op_level"]
        if summary.get("ordering"):
            o = summary["ordering"]
            print(f"median first detection: listed {o['median_first_detection_seconds_listed']} s, likely failures "
                  f"first {o['median_first_detection_seconds_ordered']} s (ratio {o['ordered_over_listed']}, "
                  f"target <= {o['target']:.2f}) over {o['faults_compared']} faults")
        print(f"unit tier, op-level faults: {u['detected']} / {u['faults']}; never fired: "
              f"{', '.join(summary['never_fired']) or 'none'}; wall {summary['wall_seconds']:.0f}s, "
              f"load {summary['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
