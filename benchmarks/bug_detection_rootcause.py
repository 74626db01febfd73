"""benchmarks/bug_detection.py's root-cause figures: what the root causes of a fault's detecting
model-tier rows name, against the op the fault was planted in.

A fault detected by a model tier (in a stage the worker localizes) is scored by the records of its
detecting rows (harness.rootcause, in results.parquet): the op they name most often, whether it is
the planted op (`top1`: any overload the fault arms), whether the repro of the first row naming it
verified, and each row's localization time. The clean run's rows that carry a record are what
localization cost the clean night.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OK = "pass"
#: root causes: the planted op named (top-1), and the repro verified, for the faults a model tier detects
TARGET_ROOT_CAUSE_TOP1 = 0.90
TARGET_ROOT_CAUSE_VERIFIED = 0.90
#: the tiers whose rows are model checks (their backend failures are localized in the worker)
MODEL_TIERS = ("representative", "full")
#: the stages a worker localizes (crash and timeout rows are localized by the runner's call journal)
LOCALIZED_STAGES = ("forward", "backward", "compile", "numerics")


def planted_overloads(fault: dict[str, Any]) -> frozenset[str]:
    """The op overloads a fault arms (an op packet arms every overload; routed ops both names), as
    the device resolves them; a partial record (a test's) names its op as written."""
    from backend.errors import FaultFileError
    from backend.faults import parse_fault

    try:
        return parse_fault(dict(fault), "<benchmark>").overloads
    except FaultFileError:
        return frozenset({fault["op"]})


def root_cause_records(run_dir: Path, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The root-cause records (contracts.rootcause, as dicts) of a tier's detecting rows in the
    stages localization covers; a detecting row without one counts as not localized."""
    rows, _ = _tier_rows(run_dir)
    if rows.empty:
        return []
    by_key = {
        (r["case_id"], r["stage"]): r.get("root_cause")
        for r in rows[["case_id", "stage", "root_cause"]].to_dict("records")
        if "root_cause" in rows
    }
    out = []
    for d in found:
        if d["stage"] not in LOCALIZED_STAGES or d["status"] == OK:
            continue
        raw = by_key.get((d["case_id"], d["stage"]))
        record = json.loads(raw) if isinstance(raw, str) and raw else None
        out.append({"case_id": d["case_id"], "stage": d["stage"], "status": d["status"], "record": record})
    return out


def root_cause_summary(fault: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the root causes of a fault's detecting model-tier rows name: the op named most often
    (ties: the first detecting row's), whether it is the planted op (top-1), whether its repro
    verified (the first row naming it), and the localization time of each row. None when no
    model-tier row detected the fault in a stage localization covers."""
    if not rows:
        return None
    planted = planted_overloads(fault)
    found = [r for r in rows if r["record"] and r["record"].get("found")]
    counts: dict[str, int] = {}
    for r in found:
        counts[r["record"]["op"]] = counts.get(r["record"]["op"], 0) + 1
    named = (
        max(counts, key=lambda op: (counts[op], -[r["record"]["op"] for r in found].index(op)))
        if counts
        else None
    )
    first = next((r for r in found if r["record"]["op"] == named), None)
    repro = (first or {}).get("record", {}).get("repro") or {} if first else {}
    why_not = [
        {
            "case_id": r["case_id"],
            "stage": r["stage"],
            "why": (r["record"] or {}).get("why", "no record")[:200],
        }
        for r in rows
        if not (r["record"] and r["record"].get("found"))
    ]
    return {
        "rows": len(rows),
        "found": len(found),
        "named": named,
        "top1": named is not None and named in planted,
        "rows_naming_planted": sum(1 for r in found if r["record"]["op"] in planted),
        "phase": first["record"].get("phase") if first else None,
        "route": first["record"].get("route") if first else None,
        "row": {"case_id": first["case_id"], "stage": first["stage"]} if first else None,
        "verified": repro.get("verified") if first else None,
        "repro_why": (repro.get("why") or "")[:240] if first else "",
        "seconds": [round(float((r["record"] or {}).get("seconds") or 0.0), 3) for r in rows if r["record"]],
        "not_found": why_not[:5],
    }


def clean_root_causes(clean_dir: Path, plans: list) -> dict[str, Any]:
    """What localization cost the clean run: its rows that carry a root-cause record, and their
    seconds (a clean device has no backend-blamed failure to localize)."""
    out: dict[str, Any] = {"rows": 0, "seconds": 0.0, "tiers": {}}
    for plan in plans:
        rows, _ = _tier_rows(clean_dir / plan["tier"])
        if rows.empty or "root_cause" not in rows:
            continue
        records = [json.loads(r) for r in rows["root_cause"].dropna() if r]
        seconds = round(sum(float(r.get("seconds") or 0.0) for r in records), 3)
        out["tiers"][plan["tier"]] = {"rows": len(records), "seconds": seconds}
        out["rows"] += len(records)
        out["seconds"] = round(out["seconds"] + seconds, 3)
    return out


def _tier_rows(run_dir: Path):
    from benchmarks.bug_detection_analysis import tier_rows

    return tier_rows(run_dir)


def root_cause_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the faults a model tier detected (in a stage localization covers): the planted op named
    (top-1), repros verified, by category, and the median localization time per row."""
    with_rc = [r for r in records if r.get("root_cause")]
    n = len(with_rc)
    top1 = [r for r in with_rc if r["root_cause"]["top1"]]
    verified = [r for r in with_rc if r["root_cause"]["verified"] is True]
    seconds = [s for r in with_rc for s in r["root_cause"]["seconds"]]
    by_category: dict[str, dict[str, int]] = {}
    for r in with_rc:
        c = by_category.setdefault(r.get("category") or "", {"faults": 0, "top1": 0, "verified": 0})
        c["faults"] += 1
        c["top1"] += int(r["root_cause"]["top1"])
        c["verified"] += int(r["root_cause"]["verified"] is True)

    def rate(k: int) -> float | None:
        return round(k / n, 4) if n else None

    return {
        "faults": n,
        "top1": len(top1),
        "top1_rate": rate(len(top1)),
        "verified": len(verified),
        "verified_rate": rate(len(verified)),
        "by_category": by_category,
        "rows": sum(r["root_cause"]["rows"] for r in with_rc),
        "median_localization_seconds": _median(seconds),
        "wrong": [
            {"name": r["name"], "planted": r["op"], "named": r["root_cause"]["named"]}
            for r in with_rc
            if not r["root_cause"]["top1"]
        ],
        "not_verified": [
            {"name": r["name"], "verified": r["root_cause"]["verified"], "why": r["root_cause"]["repro_why"]}
            for r in with_rc
            if r["root_cause"]["verified"] is not True
        ],
        "targets": {
            "top1_rate": {
                "measured": rate(len(top1)),
                "target": TARGET_ROOT_CAUSE_TOP1,
                "met": bool(n) and len(top1) / n >= TARGET_ROOT_CAUSE_TOP1,
            },
            "verified_rate": {
                "measured": rate(len(verified)),
                "target": TARGET_ROOT_CAUSE_VERIFIED,
                "met": bool(n) and len(verified) / n >= TARGET_ROOT_CAUSE_VERIFIED,
            },
        },
    }


def _median(xs: list[float]) -> float | None:
    from benchmarks.bug_detection_analysis import median

    return median(xs)
