"""The upstream tier's figures (op_db samples), as pure computation over results.parquet.

* the breakdown TorchNeuron reports: results, passed, failed, and skipped by reason
  (PyTorch's applicability checks, the backend: unsupported features and ops with no native
  lowering, the CPU reference itself), every number with its denominator;
* agreement per dtype: of the samples the CPU can run, how many the device ran and matched
  (natively or through a fallback), and how many natively;
* the ops with the most failing or falling-back samples;
* a dtype x op-family grid of native pass rates (the report draws it as a heat map).

    summary = summarize(read_results("runs/up"))
    summary.breakdown["skipped_by_reason"]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from contracts.rulefiles import Rules, cached_rules, resource
from contracts.status import FAILING_VALUES as FAILING
from contracts.status import Status, UpstreamSkip

TIER = "upstream"
#: the closed list of skip reasons, in the order reports show them
SKIP_REASONS = tuple(r.value for r in UpstreamSkip)
_BACKEND_REASONS = ("backend-unsupported", "no-native-lowering")
#: skips that mean the CPU reference cannot (or may not) be compared: outside agreement's denominator
_NOT_COMPARABLE = ("pytorch-applicability", "reference-error")


class DtypeClasses(Rules):
    """reports/data/dtype_classes.yaml: label -> the dtypes of the class, in report order."""

    version: int
    classes: dict[str, tuple[str, ...]]


def dtype_classes() -> dict[str, tuple[str, ...]]:
    """The dtype classes the agreement figures are split by."""
    return cached_rules(DtypeClasses, str(resource("reports", "data/dtype_classes.yaml"))).classes


@dataclass
class UpstreamSummary:
    cases: int
    breakdown: dict[str, Any]  # over every result row (case x stage)
    by_stage: dict[str, dict[str, Any]]  # the same breakdown per stage
    agreement: list[dict[str, Any]]  # per dtype class, forward stage
    worst_ops: list[dict[str, Any]]
    heatmap: dict[str, Any]  # {"dtypes": [...], "families": [...], "rate": [[...]], "n": [[...]]}
    per_dtype: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def upstream_rows(results: pd.DataFrame) -> pd.DataFrame:
    return results[results["tier"] == TIER] if "tier" in results else results.iloc[0:0]


def _breakdown(g: pd.DataFrame) -> dict[str, Any]:
    status = g["status"].astype(str)
    reason = g["reason"].fillna("").astype(str)
    skipped = status == Status.SKIPPED.value
    by_reason = {r: int((skipped & (reason == r)).sum()) for r in SKIP_REASONS}
    other = int(skipped.sum()) - sum(by_reason.values())
    if other:
        by_reason["other"] = other
    return {
        "results": len(g),
        "pass": int((status == Status.PASS.value).sum()),
        "failing": int(status.isin(FAILING).sum()),
        "by_status": {s.value: int((status == s.value).sum()) for s in Status},
        "skipped": int(skipped.sum()),
        "skipped_by_reason": by_reason,
        "skipped_by_backend": sum(by_reason[r] for r in _BACKEND_REASONS),
        "not_attempted": int((status == Status.NOT_ATTEMPTED.value).sum()),
    }


def _rate(n: int, d: int) -> float | None:
    return n / d if d else None


def _agreement(fwd: pd.DataFrame, dtypes: tuple[str, ...] | None, label: str) -> dict[str, Any]:
    g = fwd if dtypes is None else fwd[fwd["dtype"].isin(dtypes)]
    status, reason = g["status"].astype(str), g["reason"].fillna("").astype(str)
    comparable = ~((status == Status.SKIPPED.value) & reason.isin(_NOT_COMPARABLE))
    native = int((status == Status.PASS.value).sum())
    fallback = int(((status == Status.SKIPPED.value) & (reason == "no-native-lowering")).sum())
    unsupported = int(((status == Status.SKIPPED.value) & (reason == "backend-unsupported")).sum())
    cpu_ok = int(comparable.sum())
    return {
        "dtypes": label,
        "samples": len(g),
        "cpu_can_run": cpu_ok,
        "agree": native + fallback,
        "agree_native": native,
        "agree_via_fallback": fallback,
        "backend_unsupported": unsupported,
        "failing": int(status.isin(FAILING).sum()),
        "agreement": _rate(native + fallback, cpu_ok),
        "agreement_excluding_unsupported": _rate(native + fallback, cpu_ok - unsupported),
        "native_share": _rate(native, cpu_ok),
    }


def _op_label(op: Any, variant: Any) -> str:
    return f"{op}.{variant}" if isinstance(variant, str) and variant else str(op)


def worst_ops(up: pd.DataFrame, limit: int = 25) -> list[dict[str, Any]]:
    """Ops ranked by their failing samples, then by their falling-back samples (over all stages
    and dtypes; a sample counts once per stage)."""
    if up.empty:
        return []
    g = up.assign(
        label=[_op_label(o, v) for o, v in zip(up["op"], up["variant"])],
        failing=up["status"].isin(FAILING),
        fallback=(up["status"] == Status.SKIPPED.value) & (up["reason"] == "no-native-lowering"),
    )
    agg = g.groupby("label", sort=False).agg(
        failing=("failing", "sum"),
        fallback=("fallback", "sum"),
        results=("status", "size"),
        n_dtypes=("dtype", "nunique"),
    )
    agg = agg[(agg["failing"] > 0) | (agg["fallback"] > 0)]
    agg = agg.sort_values(["failing", "fallback", "results"], ascending=False).head(limit)
    first = {}
    bad = g[g["failing"]]
    for label, msg, reason, cls in zip(bad["label"], bad["message"], bad["reason"], bad["error_class"]):
        if label not in first:
            first[label] = " ".join(str(x) for x in (cls, reason or msg) if isinstance(x, str) and x)[:200]
    return [
        {
            "op": label,
            "failing": int(r.failing),
            "fallback": int(r.fallback),
            "results": int(r.results),
            "dtypes": int(r.n_dtypes),
            "first_problem": first.get(label, ""),
        }
        for label, r in agg.iterrows()
    ]


def heatmap(fwd: pd.DataFrame) -> dict[str, Any]:
    """Native pass rate (forward stage) per dtype x op family, over the samples the CPU can run."""
    if fwd.empty:
        return {"dtypes": [], "families": [], "rate": [], "n": []}
    status, reason = fwd["status"].astype(str), fwd["reason"].fillna("").astype(str)
    comparable = ~((status == Status.SKIPPED.value) & reason.isin(_NOT_COMPARABLE))
    g = fwd.assign(family=_families(fwd), native=status == Status.PASS.value)[comparable]
    dtypes = sorted(g["dtype"].dropna().unique().tolist())
    families = sorted(g["family"].unique().tolist())
    pivot_n = g.groupby(["family", "dtype"]).size()
    pivot_p = g.groupby(["family", "dtype"])["native"].sum()
    rate, n = [], []
    for fam in families:
        rate.append(
            [
                (float(pivot_p[(fam, d)]) / float(pivot_n[(fam, d)])) if (fam, d) in pivot_n else None
                for d in dtypes
            ]
        )
        n.append([int(pivot_n.get((fam, d), 0)) for d in dtypes])
    return {"dtypes": dtypes, "families": families, "rate": rate, "n": n}


def _families(df: pd.DataFrame) -> list[str]:
    from reports.tables import iter_json

    return [str(e.get("family") or "other") for e in iter_json(df["extra"].tolist())]


def summarize(results: pd.DataFrame) -> UpstreamSummary | None:
    """None when the results hold no upstream-tier rows."""
    up = upstream_rows(results)
    if up.empty:
        return None
    fwd = up[up["stage"] == "forward"]
    agreement = [_agreement(fwd, None, "all")]
    agreement += [
        _agreement(fwd, dts, label) for label, dts in dtype_classes().items() if fwd["dtype"].isin(dts).any()
    ]
    per_dtype = [_agreement(fwd, (d,), d) for d in sorted(fwd["dtype"].dropna().unique())]
    return UpstreamSummary(
        cases=int(up["case_id"].nunique()),
        breakdown=_breakdown(up),
        by_stage={str(s): _breakdown(g) for s, g in up.groupby("stage", sort=True)},
        agreement=agreement,
        worst_ops=worst_ops(up),
        heatmap=heatmap(fwd),
        per_dtype=per_dtype,
    )
