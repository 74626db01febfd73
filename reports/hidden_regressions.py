"""Regressions that would hide behind a status that did not change: a changed failure, more fallbacks.

`harness compare` judges a (tier, case, stage) by its status first (reports.compare). Two kinds of
regression leave the status as it was, and are found here from the row's other columns:

* a **changed failure**: failing in the baseline and now, but the error class or the failing op
  differs (yesterday `RuntimeError` in `aten.gelu`, today `KeyError` in `aten.mm`: a new bug
  behind an old one). Verdict FAIL, detail "changed failure: ...". A failure matching an
  expectation stays XFAIL (the expectation is the declared truth); so does one whose failing op
  was unknown on either day (nothing to compare).
* a **fallback regression**: the same status, but the stage gained a CPU-fallback op or its
  fallback count rose. Verdict FALLBACK_REGRESSION (contracts.status), which gates like FAIL.
  A stage whose status changed is judged by its status (an IMPROVED case runs more code, so it
  may show more fallbacks; a new FAIL gates anyway and its detail names the new ops).

    refine(merged, verdicts)   # merged: compare_frames' outer merge (suffixes _run / _base)
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from contracts.status import FAILING_VALUES, Verdict
from reports.verdicts import BASELINE_XFAIL

#: the columns this module reads (each optional: an older table without one is compared without it)
COLUMNS = ("error_class", "failing_op", "fallback_count", "fallback_ops")


def available(run: pd.DataFrame, baseline: pd.DataFrame) -> list[str]:
    return [c for c in COLUMNS if c in run.columns and c in baseline.columns]


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return str(value)


def _ops(value: Any) -> set[str]:
    if value is None or isinstance(value, float):
        return set()
    return {str(v) for v in value}


def _count(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return int(value)


def _signature(status: str, error_class: str, failing_op: str) -> str:
    text = status + (f" {error_class}" if error_class else "")
    return text + (f" in {failing_op}" if failing_op else "")


def changed_failure(row: dict[str, Any]) -> str:
    """ "" when the failure is the baseline's, else "changed failure: <baseline> -> <now>"."""
    cls_run, cls_base = _text(row.get("error_class_run")), _text(row.get("error_class_base"))
    op_run, op_base = _text(row.get("failing_op_run")), _text(row.get("failing_op_base"))
    if cls_run == cls_base and (not op_run or not op_base or op_run == op_base):
        return ""
    return (
        f"changed failure: {_signature(row['status_base'], cls_base, op_base)} -> "
        f"{_signature(row['status_run'], cls_run, op_run)}"
    )


def fallback_regression(row: dict[str, Any]) -> str:
    """ "" when the stage has no fallback op and no fallback call more than in the baseline."""
    new_ops = sorted(_ops(row.get("fallback_ops_run")) - _ops(row.get("fallback_ops_base")))
    count_run, count_base = _count(row.get("fallback_count_run")), _count(row.get("fallback_count_base"))
    parts = []
    if new_ops:
        parts.append(
            f"new fallback ops: {', '.join(new_ops[:5])}"
            + (f" (+{len(new_ops) - 5})" if len(new_ops) > 5 else "")
        )
    if count_run is not None and count_base is not None and count_run > count_base:
        parts.append(f"fallback count {count_base} -> {count_run}")
    return "; ".join(parts)


def _candidates(merged: pd.DataFrame) -> tuple[list[int], list[int]]:
    """Row positions that may hold a changed failure / a fallback regression (vectorized filters)."""
    both = merged["_merge"].astype(str) == "both"
    st_run, st_base = merged["status_run"].astype(str), merged["status_base"].astype(str)
    failing = both & st_run.isin(FAILING_VALUES) & st_base.isin(FAILING_VALUES)
    changed: list[int] = []
    if "error_class_run" in merged:
        cls = merged["error_class_run"].fillna("").astype(str) != merged["error_class_base"].fillna(
            ""
        ).astype(str)
        ops = pd.Series(False, index=merged.index)
        if "failing_op_run" in merged:
            op_r, op_b = (
                merged["failing_op_run"].fillna("").astype(str),
                merged["failing_op_base"].fillna("").astype(str),
            )
            ops = (op_r != "") & (op_b != "") & (op_r != op_b)
        changed = merged.index[failing & (cls | ops)].tolist()
    fallbacks: list[int] = []
    if "fallback_ops_run" in merged or "fallback_count_run" in merged:
        same = both & (st_run == st_base)
        more = pd.Series(False, index=merged.index)
        if "fallback_count_run" in merged:
            c_run = pd.to_numeric(merged["fallback_count_run"], errors="coerce")
            c_base = pd.to_numeric(merged["fallback_count_base"], errors="coerce")
            more = c_run.notna() & c_base.notna() & (c_run > c_base)
        has_ops = pd.Series(False, index=merged.index)
        if "fallback_ops_run" in merged:
            has_ops = merged["fallback_ops_run"].map(
                lambda v: v is not None and not isinstance(v, float) and len(v) > 0
            )
        fallbacks = merged.index[same & (more | has_ops)].tolist()
    return changed, fallbacks


def refine(merged: pd.DataFrame, verdicts: list[Any]) -> None:
    """Turn the status verdicts of `verdicts` (one per row of `merged`, same order) into changed
    failures and fallback regressions where the rows say so (in place)."""
    changed, fallbacks = _candidates(merged)
    columns = list(merged.columns)
    for i in changed:
        v = verdicts[i]
        if v.verdict is Verdict.XFAIL and v.detail.startswith(BASELINE_XFAIL):
            detail = changed_failure(dict(zip(columns, merged.iloc[i].tolist())))
            if detail:
                v.verdict, v.detail = Verdict.FAIL, detail
    for i in fallbacks:
        v = verdicts[i]
        if v.verdict not in (Verdict.PASS, Verdict.XFAIL, Verdict.FAIL):
            continue
        detail = fallback_regression(dict(zip(columns, merged.iloc[i].tolist())))
        if not detail:
            continue
        if v.verdict is Verdict.FAIL:
            v.detail = f"{v.detail}; {detail}"
        else:
            v.verdict, v.detail = Verdict.FALLBACK_REGRESSION, detail + (f" ({v.detail})" if v.detail else "")
