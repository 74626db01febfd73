"""`harness explain RUNDIR`: the root cause of every backend failure of a run, and its repro.

Examples:
    harness explain runs/nightly                         # every row that carries a root cause
    harness explain runs/nightly --json                  # one JSON object (rows, summary, repro files)
    harness explain runs/nightly/full --case catalog/bert/BertForMaskedLM
    harness explain runs/u1 --case aten.gelu.default-00e710688075

Prints each root cause a row carries, whichever route found it (the eager or compiled shadow, the
accuracy minifier, the worker's call journal for a crash or hang, and for a backend that lowers
above the dispatcher the raising call's exception or the function shadow): the op, the phase and
call index, where it ran (module path, model source line), its inputs, the mismatch against its
tolerance, the repro file and whether it is verified; and every backend-blamed failure without a
root cause, with why not. The standalone tests of the repros are written to RUNDIR/repros/.
With --case, a backend-blamed row of that case that carries no root cause (a run made with
HARNESS_ROOT_CAUSE=off, or before localization existed) is localized here: the case is checked
again in this process and its failing steps shadowed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HELP = "Explain a run's backend failures: the aten call that broke each, and its checked repro."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "examples:" + __doc__.split("Examples:", 1)[1]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "rundir", metavar="RUNDIR", help="a run directory (harness run --out) or a nightly dir"
    )
    parser.add_argument(
        "--case", metavar="ID", help="only this case (and localize its rows that have no root cause)"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        metavar="S",
        help="time limit per row when localizing with --case (default: $HARNESS_ROOT_CAUSE_SECONDS)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


# ----------------------------------------------------------------------------------- text


def describe(rc: Any) -> list[str]:
    """The lines of one root-cause record (contracts.rootcause.RootCause)."""
    if not rc.found:
        lines = [f"root cause: not found: {rc.why}"]
        if rc.gave_up:
            lines.append(f"  gave up: {rc.gave_up}")
        return lines
    call = f"{rc.phase} call {rc.call_index}" if rc.call_index is not None else rc.phase
    lines = [f"root cause: {rc.op} ({rc.kind}, {call}, found by {rc.route})"]
    where = "  ".join(x for x in (rc.module_path, rc.source_line) if x)
    if where:
        lines.append(f"  where:    {where}")
    inputs = [
        f"{d}{s}" + (f" stride {tuple(st)}" if st and not _contiguous(s, st) else "")
        for s, d, st in zip(
            rc.input_shapes, rc.input_dtypes, rc.input_strides or [None] * len(rc.input_shapes)
        )
        if s is not None
    ]
    if inputs:
        lines.append(f"  inputs:   {', '.join(inputs)[:300]}")
    m = rc.mismatch
    if m is not None:
        lines.append(
            f"  mismatch: output {m.output} {m.dtype}{m.shape}: max abs {m.max_abs:.3g}, "
            f"max rel {m.max_rel:.3g} against {m.tolerance_class} (atol {m.atol:g}, rtol {m.rtol:g})"
        )
    if rc.kind == "error":
        lines.append(f"  error:    {rc.error_class}: {rc.message[:200]}")
    if rc.repro is not None:
        verdict = {True: "verified", False: "NOT verified", None: "not verified"}[rc.repro.verified]
        lines.append(f"  repro:    {rc.repro.path or '(none)'}  {verdict}: {rc.repro.why[:240]}")
    lines.append(f"  why:      {rc.why[:400]}")
    if rc.gave_up:
        lines.append(f"  gave up:  {rc.gave_up}")
    return lines


def _contiguous(shape: list[int], stride: list[int]) -> bool:
    acc, expected = 1, []
    for size in reversed(shape):
        expected.append(acc)
        acc *= max(int(size), 1)
    return all(sz == 1 or a == b for sz, a, b in zip(shape, stride, expected[::-1]))


# ----------------------------------------------------------------------------------- rows


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    """Every row of the run that carries a root cause or should (a backend-blamed failure of a
    stage localization covers)."""
    from contracts.rootcause import RootCause
    from harness.rootcause.localize import LOCALIZED, STATUSES
    from reports.tables import read_results

    frame = read_results(run_dir)
    statuses = {s.value for s in STATUSES}
    # model cases (checked from a `load` stage on): an op_db sample's forward is no model's
    loads = frame[frame["stage"] == "load"]
    models = set(zip(loads["tier"], loads["case_id"]))
    out = []
    for row in frame.to_dict("records"):
        raw = row.get("root_cause")
        has = isinstance(raw, str) and bool(raw)
        wants = (
            row.get("blame") == "backend"
            and row["stage"] in LOCALIZED
            and row["status"] in statuses
            and (row["tier"], row["case_id"]) in models
        )
        if has or wants:
            row["root_cause"] = RootCause.from_dict(json.loads(raw)) if has else None
            out.append(row)
    return out


def _localize_case(run_dir: Path, case_id: str, stages: list[str], seconds: float | None) -> dict[str, Any]:
    """Check the case again here and localize its backend-blamed rows: stage -> RootCause."""
    from contracts.rootcause import RootCause
    from harness.rootcause.localize import check_with_root_cause
    from harness.rootcause.repro import run_backend

    case = _find_case(run_dir, case_id)
    if case is None or "spec" not in (case.payload or {}):
        why = "the case is not a model case of this run (no cases-*.json names it)"
        return {s: RootCause.not_found(why) for s in stages}
    result = check_with_root_cause(case.spec(), run_backend(run_dir), stages, seconds=seconds, force=True)
    out = {}
    for s in stages:
        r = result.stages.get(s)
        if r is None:
            continue
        if r.root_cause:
            out[s] = RootCause.from_dict(r.root_cause)
        else:
            why = f"checked again here: {s} {r.status.value}" + (f", blamed {r.blame}" if r.blame else "")
            out[s] = RootCause.not_found(why)
    return out


def _find_case(run_dir: Path, case_id: str) -> Any:
    from contracts.records import Case

    for path in sorted(run_dir.rglob("cases-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for c in data.get("cases") or []:
            if c.get("case_id") == case_id:
                return Case(**c)
    return None


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from harness.rootcause.repro import write_repros

    run_dir = Path(args.rundir)
    try:
        rows = _rows(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"harness explain: {exc}", file=sys.stderr)
        return 2
    if args.case:
        rows = [r for r in rows if r["case_id"] == args.case]
        missing = [r for r in rows if r["root_cause"] is None]
        if missing:
            from contracts.status import stage_order

            stages = sorted({r["stage"] for r in missing}, key=stage_order)
            found = _localize_case(run_dir, args.case, stages, args.seconds)
            for r in missing:
                rc = found.get(r["stage"])
                r["root_cause"] = (
                    replace(rc, extra={**rc.extra, "localized_by": "harness explain"}) if rc else None
                )
    written = write_repros(run_dir, [r for r in rows if r["root_cause"] is not None])
    summary = {
        "rows": len(rows),
        "found": sum(1 for r in rows if r["root_cause"] is not None and r["root_cause"].found),
        "verified": sum(
            1
            for r in rows
            if r["root_cause"] is not None
            and r["root_cause"].repro is not None
            and r["root_cause"].repro.verified
        ),
        "not_found": sum(1 for r in rows if r["root_cause"] is not None and not r["root_cause"].found),
        "not_localized": sum(1 for r in rows if r["root_cause"] is None),
    }
    if args.json:
        print(
            json.dumps(
                {
                    "run": str(run_dir),
                    "summary": summary,
                    "repro_files": written,
                    "rows": [
                        {
                            **{
                                k: r.get(k)
                                for k in ("tier", "case_id", "stage", "status", "blame", "model_id")
                            },
                            "root_cause": None if r["root_cause"] is None else r["root_cause"].to_dict(),
                        }
                        for r in rows
                    ],
                },
                default=str,
            )
        )
        return 0
    if not rows:
        print(
            f"{run_dir}: no backend-blamed failure to explain"
            + (f" for case {args.case}" if args.case else "")
        )
        return 0
    for r in rows:
        print(f"{r['tier']}/{r['case_id']} [{r['stage']}] {r['status']}, blamed {r.get('blame') or '-'}")
        rc = r["root_cause"]
        lines = (
            describe(rc)
            if rc is not None
            else ["root cause: not localized (the run did not localize it; --case ID does)"]
        )
        print("\n".join("  " + ln for ln in lines))
    print(
        f"\n{summary['found']} of {summary['rows']} rows localized, {summary['verified']} repros verified, "
        f"{summary['not_found']} not found, {summary['not_localized']} not localized"
        + (f"; repro files in {run_dir / 'repros'}" if written else "")
    )
    return 0
