"""What benchmarks/bug_detection.py's runs mean: detections, first-detection times, the summary.

A fault is *caught* by a tier when some (case, stage) row of the faulted run is one `harness
compare` gates on by default against the clean run (harness.engine.failfast.gated_regressions, the same
definition fail-fast stops at: a new or changed failure not blamed on others, or a fallback
regression); rows that flip in the control run never count. Times are tier-elapsed
seconds: a tier that fail-fast stopped and was resumed (a stop on a flaky row) has several run
segments in timing.json, and the gaps between them are not counted.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.bug_detection_rootcause import (  # noqa: F401  (MODEL_TIERS, clean_root_causes: re-exported)
    MODEL_TIERS,
    clean_root_causes,
    root_cause_figures,
    root_cause_records,
    root_cause_summary,
)

OK = "pass"
TARGET_NIGHTLY = 0.95
TARGET_UNIT_OP_LEVEL = 0.80
TARGET_ORDERED_RATIO = 1 / 3


def tier_rows(run_dir: Path) -> tuple[pd.DataFrame, dict[str, float]]:
    """A tier run directory's results rows, as its results.parquet holds them (journal + reference
    re-runs, blamed: harness.engine.runner.write_tables' path), and when each case finished (journal).
    Read again only when a journal changed (the clean run's rows are asked for once per fault)."""
    path = run_dir / "journal.jsonl"
    if not path.exists():
        return pd.DataFrame(), {}
    ref = run_dir / "reference" / "journal.jsonl"
    stamp = tuple((p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else None for p in (path, ref))
    return _tier_rows(run_dir.resolve(), stamp)


@functools.lru_cache(maxsize=8)
def _tier_rows(run_dir: Path, stamp: tuple) -> tuple[pd.DataFrame, dict[str, float]]:
    from contracts.rows import case_rows
    from harness.engine.rerun import blamed, reference_outcomes

    path = run_dir / "journal.jsonl"
    meta = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    refs = reference_outcomes(run_dir)
    rows, at = [], {}
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec["case_id"] in at:
            continue  # journaled twice (a resumed chunk): the first record is the table's
        at[rec["case_id"]] = float(rec.get("journaled_at", 0.0))
        rows.extend(asdict(r) for r in case_rows(blamed(rec, meta.get("backend"), refs), "").rows)
    return pd.DataFrame(rows), at


def max_case_seconds(run_dir: Path) -> float:
    worst = 0.0
    path = run_dir / "journal.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            worst = max(worst, float(json.loads(line)["outcome"].get("seconds") or 0.0))
        except (ValueError, KeyError):
            continue
    return worst


def detections(clean_dir: Path, run_dir: Path, flaky: set) -> list[dict[str, Any]]:
    """The rows of run_dir that `harness compare` gates on by default against clean_dir (the one
    definition: harness.engine.failfast.gated_regressions), rows that flip in the control run excluded;
    by the time their case finished."""
    from harness.engine.failfast import gated_regressions

    clean, _ = tier_rows(clean_dir)
    run, at = tier_rows(run_dir)
    if clean.empty or run.empty:
        return []
    meta = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    found = [
        {**d, "at": at[d["case_id"]]}
        for d in gated_regressions(run, clean, meta.get("backend"))
        if (d["case_id"], d["stage"]) not in flaky
    ]
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


def segments(t: dict[str, Any]) -> list[tuple[float, float]]:
    """A tier's run segments [(start, end)] (one unless it was resumed after a flaky stop)."""
    if t.get("segments"):
        return [(float(a), float(b)) for a, b in t["segments"]]
    return [(float(t["start"]), float(t["end"]))] if "start" in t and "end" in t else []


def elapsed(t: dict[str, Any], at: float | None = None) -> float:
    """Seconds the tier ran (until wall time `at`, if given), gaps between segments left out."""
    total = 0.0
    for a, b in segments(t):
        if at is not None and at < b:
            return total + max(0.0, at - a)
        total += b - a
    return total


def startup_seconds(run_dir: Path) -> float | None:
    """The worker start-up (spawn to ready: interpreter, torch, the tier's setup) that a tier run's
    first outcome journals: a fixed cost every order pays before its first case can run."""
    path = run_dir / "journal.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            value = json.loads(line)["outcome"].get("worker", {}).get("startup_seconds")
        except (ValueError, KeyError, AttributeError):
            continue
        if value is not None:
            return float(value)
    return None


def analyse(
    fault: dict[str, Any], run_dir: Path, clean_dir: Path, plans: list, flaky: dict
) -> dict[str, Any]:
    timing = json.loads((run_dir / "timing.json").read_text()) if (run_dir / "timing.json").exists() else {}
    fired = fired_of(run_dir)
    record: dict[str, Any] = {
        "name": fault["name"],
        "kind": fault["kind"],
        "category": fault.get("category", ""),
        "op": fault["op"],
        "scope": fault.get("scope", "both"),
        "description": fault.get("description", ""),
        "fired": bool(fired),
        "fired_in": sorted({"compiled" if f.get("compiled") else "eager" for f in fired}),
        "fired_tiers": [
            p["tier"]
            for p in plans
            if any(
                any(a <= f.get("time", 0) <= b for a, b in segments(timing.get(p["tier"], {}))) for f in fired
            )
        ],
        "caught_by": [],
        "first_tier": None,
        "tiers": {},
        "first_detection_seconds": None,
        "tiers_run": [p["tier"] for p in plans if timing.get(p["tier"])],
    }
    offset = 0.0
    records: list[dict[str, Any]] = []
    for plan in plans:
        name = plan["tier"]
        t = timing.get(name, {})
        if not t:
            continue  # not run: an earlier tier's detection stopped the fail-fast nightly
        found = detections(clean_dir / name, run_dir / name, flaky.get(name, set()))
        entry: dict[str, Any] = {
            "rows": len(found),
            "cases": len({d["case_id"] for d in found}),
            "seconds": round(elapsed(t), 1),
            "stopped": bool(t.get("stopped")),
        }
        if t.get("rc") not in (0, None):
            entry["error"] = t.get("stderr")
        if name in MODEL_TIERS:
            records.extend(root_cause_records(run_dir / name, found))
        if found:
            first = found[0]
            entry["first"] = {
                k: first[k]
                for k in ("case_id", "stage", "status", "reason", "failing_op", "verdict", "detail")
            }
            entry["first_detection_seconds"] = round(elapsed(t, first["at"]), 1)
            record["caught_by"].append(name)
            if record["first_detection_seconds"] is None:
                record["first_tier"] = name
                record["first_detection_seconds"] = round(offset + entry["first_detection_seconds"], 1)
                up = startup_seconds(run_dir / name)  # the detecting tier's worker start-up
                record["startup_seconds"] = None if up is None else round(up, 1)
        elif t.get("stopped"):  # the runner stopped at a regression this analysis does not count
            entry["stopped_without_detection"] = t["stopped"][:3]
        record["tiers"][name] = entry
        offset += elapsed(t)
    record["detected"] = bool(record["caught_by"])
    record["seconds"] = round(offset, 1)
    record["root_cause"] = root_cause_summary(fault, records)
    return record


def stop_counts(t: dict[str, Any], found: list[dict[str, Any]]) -> bool:
    """Is a fail-fast stop a detection? Only when one of the rows it stopped at is among the tier's
    detections (`found`): a stop at rows that flip in the control run too, or that the runner's
    reference re-run later blamed on someone else (compare does not gate them), is none - the
    tier is resumed."""
    keys = {(d["case_id"], d["stage"]) for d in found}
    return any((r["case_id"], r["stage"]) in keys for r in t.get("stopped") or [])


def is_op_level(fault: dict[str, Any]) -> bool:
    """A fault a single op's replay can reveal: every one but the compile-only ones (a lost
    lowering too: the replay records the op's fallback, a regression compare gates on)."""
    return fault.get("scope", "both") != "compiled"


def summarize(
    records: list[dict[str, Any]],
    plans: list,
    faults: list[dict[str, Any]],
    quick_nightly: bool = True,
    fail_fast: bool = False,
) -> dict[str, Any]:
    """The `--json` object; targets only when the plans are the whole quick nightly.

    `per_tier` counts the faults each tier caught; fail-fast, a tier runs only when the tiers
    before it caught nothing, so it counts the faults each tier was the *first* to catch."""
    by_name = {f["name"]: f for f in faults}
    n = len(records)
    detected = [r for r in records if r["detected"]]
    per_tier = {}
    for plan in plans:
        t = plan["tier"]
        caught = [r["name"] for r in records if t in r["caught_by"]]
        per_tier[t] = {
            "detected": len(caught),
            "rate": round(len(caught) / n, 4) if n else None,
            "first": sum(1 for r in records if r.get("first_tier") == t),
        }
    op_level = [r for r in records if is_op_level(by_name[r["name"]])]
    # the unit tier runs first in the nightly, so fail-fast or not, it ran whole wherever it caught nothing
    unit_caught = [r for r in op_level if "unit" in r["caught_by"]]
    times = sorted(r["first_detection_seconds"] for r in detected if r["first_detection_seconds"] is not None)
    out = {
        "faults": records,
        "detected": len(detected),
        "per_tier": per_tier,
        "per_tier_meaning": "first detecting tier (fail-fast)" if fail_fast else "each tier run in full",
        "missed": [r["name"] for r in records if not r["detected"]],
        "n_faults": n,
        "detection_rate": round(len(detected) / n, 4) if n else None,
        "never_fired": [r["name"] for r in records if not r["fired"]],
        "unit_op_level": {
            "faults": len(op_level),
            "detected": len(unit_caught),
            "rate": round(len(unit_caught) / len(op_level), 4) if op_level else None,
        },
        "median_first_detection_seconds": times[len(times) // 2] if times else None,
        "tiers": [p["tier"] for p in plans],
        "limits": {p["tier"]: p["limit"] for p in plans},
        "fail_fast": fail_fast,
    }
    out["root_causes"] = root_cause_figures(records)
    if quick_nightly:
        out["targets"] = {
            "nightly_rate": {
                "measured": out["detection_rate"],
                "target": TARGET_NIGHTLY,
                "met": bool(n) and out["detection_rate"] >= TARGET_NIGHTLY,
            },
            "unit_op_level_rate": {
                "measured": out["unit_op_level"]["rate"],
                "target": TARGET_UNIT_OP_LEVEL,
                "met": bool(op_level) and out["unit_op_level"]["rate"] >= TARGET_UNIT_OP_LEVEL,
            },
        }
    return out


def median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else round((xs[mid - 1] + xs[mid]) / 2, 1)


def ordering_summary(listed: list[dict[str, Any]], ordered: list[dict[str, Any]]) -> dict[str, Any]:
    """Median time to the first detection with and without the order, over faults both caught."""
    by_name = {r["name"]: r for r in ordered}
    pairs = [
        (r["first_detection_seconds"], by_name[r["name"]]["first_detection_seconds"])
        for r in listed
        if r["name"] in by_name
        and r["first_detection_seconds"] is not None
        and by_name[r["name"]]["first_detection_seconds"] is not None
    ]
    without, with_ = median([a for a, _ in pairs]), median([b for _, b in pairs])
    ratio = round(with_ / without, 3) if with_ is not None and without else None
    # the same figure with each run's own worker start-up taken out (both orders pay it before any
    # case runs; ordering's own costs, the fingerprint probe and the order, stay in)
    after = [
        (
            r["first_detection_seconds"] - r["startup_seconds"],
            by_name[r["name"]]["first_detection_seconds"] - by_name[r["name"]]["startup_seconds"],
        )
        for r in listed
        if r["name"] in by_name
        and r.get("startup_seconds") is not None
        and by_name[r["name"]].get("startup_seconds") is not None
        and r["first_detection_seconds"] is not None
        and by_name[r["name"]]["first_detection_seconds"] is not None
    ]
    a_without, a_with = median([a for a, _ in after]), median([b for _, b in after])
    differ = [
        r["name"]
        for r in listed
        if r["name"] in by_name and sorted(r["caught_by"]) != sorted(by_name[r["name"]]["caught_by"])
    ]
    return {
        "faults_compared": len(pairs),
        "median_first_detection_seconds_listed": without,
        "median_first_detection_seconds_ordered": with_,
        "ordered_over_listed": ratio,
        "target": round(TARGET_ORDERED_RATIO, 4),
        "met": ratio is not None and ratio <= TARGET_ORDERED_RATIO,
        "after_startup": {
            "faults_compared": len(after),
            "median_seconds_listed": a_without,
            "median_seconds_ordered": a_with,
            "ordered_over_listed": round(a_with / a_without, 3) if a_with is not None and a_without else None,
        },
        "detections_differ": differ,
    }


def markdown(summary: dict[str, Any]) -> str:
    ordered = summary.get("order") == "both"
    head = (
        "| fault | category | kind | op | caught | first tier | first detecting row | op the row names"
        " | s to first detection"
        + (" listed / ordered" if ordered else "")
        + " | fired in | root cause | repro |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["faults"]:
        tier = r.get("first_tier")
        first = r["tiers"].get(tier, {}).get("first", {}) if tier else {}
        row = f"`{first['case_id'][:48]}` {first['stage']} {first['status']}" if first else ""
        secs = "" if r["first_detection_seconds"] is None else f"{r['first_detection_seconds']:.0f}"
        if ordered:
            o = (r.get("ordered") or {}).get("first_detection_seconds")
            secs += " / " + ("not run" if r.get("ordered") is None else "-" if o is None else f"{o:.0f}")
        fired = ", ".join(r["fired_tiers"]) or "never"
        if "compiled" in r["fired_in"]:
            fired += " (compiled)" if r["fired_in"] == ["compiled"] else " (eager + compiled)"
        kind = r["kind"] + (" (compiled)" if r["scope"] == "compiled" else "")
        rc = r.get("root_cause")
        named = (
            ""
            if rc is None
            else (f"`{rc['named']}` ({rc['phase']}, {rc['route']})" if rc["named"] else "not found")
        )
        if rc is not None and rc["named"] and not rc["top1"]:
            named = f"**{named}**"
        repro = (
            ""
            if rc is None or not rc["named"]
            else {True: "verified", False: "**not verified**"}.get(rc["verified"], "**not verified**")
        )
        lines.append(
            f"| {r['name']} | {r['category']} | {kind} | `{r['op']}` | {'yes' if r['detected'] else '**no**'}"
            f" | {tier or ''} | {row} | {first.get('failing_op') or ''} | {secs} | {fired}"
            f" | {named} | {repro} |"
        )
    return "\n".join(lines)
