"""Coverage with its denominators, as pure computation over a run's tables (no I/O here).

Three views, never a rate without its denominator:

* per tier and stage: cases (and models, downloads) by status, skips and not-attempted by reason;
* three levels kept apart (reports/data/levels.yaml): loads, computes (forward + backward), runs
  fully on device (no fallback), by cases, models and downloads, with what blocked the rest;
* fallback ops ranked by the models and the download share they block (from per_op), and the
  levels broken down by trait.

Usage::

    from reports.coverage import summarize_run
    cov = summarize_run("runs/2026-11-29")
    for lv in cov.levels: print(lv.tier, lv.level, lv.fmt_models())
"""

from __future__ import annotations

import functools
import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

import pandas as pd
import yaml

from contracts.status import MODEL_STAGES, STATUS_VALUES, UNFINISHED_VALUES


def fmt_rate(n: float, d: float, weighted: bool = False) -> str:
    """'12/40 (30.0%)': a rate always printed with its numerator and denominator."""
    if weighted:
        return f"{n:,.0f}/{d:,.0f} ({100.0 * n / d:.1f}%)" if d else f"{n:,.0f}/0 (n/a)"
    return f"{int(n)}/{int(d)} ({100.0 * n / d:.1f}%)" if d else f"{int(n)}/0 (n/a)"


@dataclass(frozen=True)
class Level:
    name: str
    title: str
    stages: tuple[str, ...]
    skipped_ok: frozenset[str] = frozenset()
    from_fallbacks: str = ""  # stage derived from fallback counts when a tier does not record it


@functools.cache
def levels() -> tuple[Level, ...]:
    data = yaml.safe_load(resources.files("reports").joinpath("data/levels.yaml").read_text())
    return tuple(Level(d["name"], d["title"], tuple(d["stages"]), frozenset(d.get("skipped_ok", ())),
                       d.get("from_fallbacks", "")) for d in data["levels"])


@dataclass
class StageCoverage:
    tier: str
    stage: str
    cases: int  # denominator
    models: int  # denominator: models the cases stand for
    weight: float  # denominator: their downloads
    by_status: dict[str, int]  # cases per Status value (all eight keys)
    models_by_status: dict[str, int]
    skipped_reasons: dict[str, int]
    not_attempted_reasons: dict[str, int]

    @property
    def passed(self) -> int:
        return self.by_status["pass"]

    @property
    def errored(self) -> int:  # raised, timed out, ran out of memory or crashed
        return sum(self.by_status[s] for s in UNFINISHED_VALUES)


@dataclass
class LevelCoverage:
    tier: str
    level: str
    title: str
    cases: int
    models: int
    weight: float
    cases_reached: int
    models_reached: int
    weight_reached: float
    not_reached: dict[str, int]  # models per status that stopped the level
    blockers: list[dict[str, Any]] = field(default_factory=list)  # stage/status/reason with models

    def fmt_models(self) -> str:
        return fmt_rate(self.models_reached, self.models) if self.models else fmt_rate(self.cases_reached, self.cases)

    def fmt_weight(self) -> str:
        return fmt_rate(self.weight_reached, self.weight, weighted=True)


@dataclass
class TraitCoverage:
    tier: str
    trait: str
    value: str
    models: int
    weight: float
    reached: dict[str, int]  # level name -> models that reached it


@dataclass
class Coverage:
    run_ids: list[str]
    stages: list[StageCoverage]
    levels: list[LevelCoverage]
    traits: list[TraitCoverage]
    top_fallback_ops: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------- stages

def _case_frame(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (tier, case): n_models and weight (the same on every stage row of a case)."""
    cases = results.groupby(["tier", "case_id"], sort=False).agg(
        n_models=("n_models", "first"), weight=("weight", "first"), traits=("traits", "first"))
    cases["n_models"] = cases["n_models"].fillna(0).astype(int)
    cases["weight"] = cases["weight"].fillna(0.0).astype(float)
    return cases


def stage_coverage(results: pd.DataFrame) -> list[StageCoverage]:
    out = []
    df = results.assign(n_models=results["n_models"].fillna(0).astype(int),
                        weight=results["weight"].fillna(0.0).astype(float))
    for (tier, stage), g in df.groupby(["tier", "stage"], sort=True):
        counts = g["status"].value_counts()
        models = g.groupby("status")["n_models"].sum()
        reasons = {s: Counter(g.loc[g["status"] == s, "reason"].fillna("(no reason)"))
                   for s in ("skipped", "not_attempted")}
        out.append(StageCoverage(
            tier=str(tier), stage=str(stage), cases=len(g), models=int(g["n_models"].sum()),
            weight=float(g["weight"].sum()),
            by_status={s: int(counts.get(s, 0)) for s in STATUS_VALUES},
            models_by_status={s: int(models.get(s, 0)) for s in STATUS_VALUES},
            skipped_reasons=dict(reasons["skipped"].most_common()),
            not_attempted_reasons=dict(reasons["not_attempted"].most_common())))
    order = {s: i for i, s in enumerate(MODEL_STAGES)}
    return sorted(out, key=lambda s: (s.tier, order.get(s.stage, 99), s.stage))


# ---------------------------------------------------------------------------------------- levels

def _from_fallbacks(counts: list[float], ops: set[str]) -> tuple[str, str]:
    """A stage the tier did not record, judged from the case's fallback counts."""
    known = [c for c in counts if c == c]  # NaN: the backend could not report
    if not known:
        return "not_attempted", "stage not recorded and no fallback count reported"
    if sum(known) > 0:
        return "fail", "fallback: " + (", ".join(sorted(ops)) if ops else "unknown op")
    return "pass", ""


def _level_status(stages: dict[str, tuple[str, str]], level: Level, fallbacks: tuple[list[float], set[str]],
                  tier_stages: set[str]) -> tuple[str, str, str]:
    """(status, stage, reason) of one case at one level: 'pass' or the first stage that stopped it."""
    for stage in level.stages:
        if stage == level.from_fallbacks and stage not in tier_stages:
            status, reason = _from_fallbacks(*fallbacks)
        else:
            status, reason = stages.get(stage, ("not_attempted", "stage not recorded"))
        if status == "pass" or (status == "skipped" and stage in level.skipped_ok):
            continue
        return status, stage, reason
    return "pass", "", ""


def case_levels(results: pd.DataFrame) -> pd.DataFrame:
    """Per model-tier case: the status of each level (columns = level names), n_models, weight, traits.

    Only cases with a `load` row are model cases; unit-tier cases have no levels.
    """
    model_cases = results.loc[results["stage"] == "load", ["tier", "case_id"]].drop_duplicates()
    if model_cases.empty:
        return pd.DataFrame()
    df = results.merge(model_cases, on=["tier", "case_id"])
    # why a stage stopped, in a form that groups: the exception type for unfinished stages, else the reason
    unfinished = df["status"].isin(list(UNFINISHED_VALUES)) & df["error_class"].notna() \
        & (df["error_class"] != "")
    reason = df["reason"].where(~unfinished, df["error_class"]).fillna(df["error_class"]).fillna("")
    reason = reason.str.slice(0, 160)
    per_case: dict[tuple[str, str], dict[str, tuple[str, str]]] = defaultdict(dict)
    fallbacks: dict[tuple[str, str], tuple[list[float], set[str]]] = defaultdict(lambda: ([], set()))
    cols = (df["tier"].tolist(), df["case_id"].tolist(), df["stage"].tolist(), df["status"].tolist(),
            reason.tolist(), df["fallback_count"].astype("float64").tolist(),
            df["fallback_ops"].tolist())  # bulk conversion: iterating Arrow-backed Series is ~10x slower
    for tier, case, stage, status, why, n_fallbacks, ops in zip(*cols):
        per_case[(tier, case)][stage] = (status, why)
        counts, names = fallbacks[(tier, case)]
        counts.append(n_fallbacks)
        if ops is not None and not isinstance(ops, float):
            names.update(str(o) for o in ops)
    cases = _case_frame(df)
    tier_stages = df.groupby("tier")["stage"].unique().map(set).to_dict()  # stages each tier records
    rows = []
    for key, stages in per_case.items():
        row = {"tier": key[0], "case_id": key[1]}
        for lv in levels():
            status, stage, why = _level_status(stages, lv, fallbacks[key], tier_stages[key[0]])
            row[lv.name], row[f"{lv.name}_stage"], row[f"{lv.name}_reason"] = status, stage, why
        rows.append(row)
    return pd.DataFrame(rows).merge(cases.reset_index(), on=["tier", "case_id"])


def level_coverage(per_case: pd.DataFrame, top_blockers: int = 5) -> list[LevelCoverage]:
    out = []
    if per_case.empty:
        return out
    for tier, g in per_case.groupby("tier", sort=True):
        for lv in levels():
            ok = g[lv.name] == "pass"
            bad = g[~ok]
            blockers = (bad.groupby([f"{lv.name}_stage", lv.name, f"{lv.name}_reason"])
                        .agg(cases=("case_id", "size"), models=("n_models", "sum"))
                        .sort_values(["models", "cases"], ascending=False).head(top_blockers).reset_index())
            out.append(LevelCoverage(
                tier=str(tier), level=lv.name, title=lv.title, cases=len(g), models=int(g["n_models"].sum()),
                weight=float(g["weight"].sum()), cases_reached=int(ok.sum()),
                models_reached=int(g.loc[ok, "n_models"].sum()), weight_reached=float(g.loc[ok, "weight"].sum()),
                not_reached={s: int(bad.loc[bad[lv.name] == s, "n_models"].sum())
                             for s in STATUS_VALUES if s != "pass" and (bad[lv.name] == s).any()},
                blockers=[{"stage": r[0], "status": r[1], "reason": r[2], "cases": int(r[3]), "models": int(r[4])}
                          for r in blockers.itertuples(index=False)]))
    return out


def _trait_items(traits_json: Any) -> list[tuple[str, str]]:
    if not isinstance(traits_json, str) or not traits_json:
        return []
    try:
        traits = json.loads(traits_json)
    except ValueError:
        return []
    items = []
    for key, value in (traits.items() if isinstance(traits, dict) else ()):
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, dict):
                continue
            items.append((str(key), json.dumps(v) if isinstance(v, bool) or v is None else str(v)))
    return items


def trait_coverage(per_case: pd.DataFrame) -> list[TraitCoverage]:
    acc: dict[tuple[str, str, str], dict[str, Any]] = {}
    if per_case.empty:
        return []
    names = [lv.name for lv in levels()]
    parsed: dict[Any, list[tuple[str, str]]] = {}  # the same traits string recurs: parse it once
    reached = list(zip(*(per_case[n].eq("pass").tolist() for n in names)))
    for tier, traits, n_models, weight, ok in zip(per_case["tier"].tolist(), per_case["traits"].tolist(),
                                                  per_case["n_models"].tolist(), per_case["weight"].tolist(),
                                                  reached):
        if traits not in parsed:
            parsed[traits] = _trait_items(traits)
        for trait, value in parsed[traits]:
            a = acc.setdefault((tier, trait, value), {"models": 0, "weight": 0.0, **{n: 0 for n in names}})
            a["models"] += n_models
            a["weight"] += weight
            for n, hit in zip(names, ok):
                if hit:
                    a[n] += n_models
    return [TraitCoverage(tier=k[0], trait=k[1], value=k[2], models=v["models"], weight=v["weight"],
                          reached={n: v[n] for n in names}) for k, v in sorted(acc.items())]


def top_fallback_ops(per_op: pd.DataFrame, limit: int = 20) -> list[dict[str, Any]]:
    """Ops ranked by the models they block, then by the download share they block."""
    if per_op.empty:
        return []
    df = per_op[per_op["cases_blocked"].fillna(0) > 0].copy()
    df["_share"] = df["download_share_blocked"].fillna(0.0)
    df = df.sort_values(["models_blocked", "_share", "cases_blocked", "op"], ascending=[False, False, False, True])
    cols = ["tier", "op", "models_blocked", "models_total", "download_share_blocked", "cases_blocked",
            "fallback_calls", "native_calls"]
    out = []
    for rec in df[cols].head(limit).to_dict("records"):
        out.append({k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()})
    return out


def summarize(results: pd.DataFrame, per_op: pd.DataFrame | None = None) -> Coverage:
    per_case = case_levels(results)
    return Coverage(run_ids=sorted(results["run_id"].dropna().unique().tolist()),
                    stages=stage_coverage(results), levels=level_coverage(per_case),
                    traits=trait_coverage(per_case),
                    top_fallback_ops=top_fallback_ops(per_op if per_op is not None else pd.DataFrame()))


def summarize_run(run_dir) -> Coverage:
    from reports.tables import read_table  # the only I/O, kept at the edge

    return summarize(read_table(run_dir, "results"), read_table(run_dir, "per_op"))
