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

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from contracts.rulefiles import Rules, cached_rules, resource
from contracts.status import MODEL_STAGES, STATUS_VALUES, UNFINISHED_VALUES, Blame, headline_status

#: Keys of the blame splits: the Blame values, then "none" (a non-pass nobody is blamed for: not
#: applicable, cannot report, or a run written before blame existed).
BLAME_KEYS: tuple[str, ...] = tuple(b.value for b in Blame) + ("none",)
#: Blames an attributable denominator leaves out: failures that are neither the device's nor the
#: harness' to fix (transformers' own, a package missing here).
EXCLUDED_BLAMES: tuple[str, ...] = (Blame.UPSTREAM.value, Blame.ENVIRONMENT.value)


def fmt_rate(n: float, d: float, weighted: bool = False) -> str:
    """'12/40 (30.0%)': a rate always printed with its numerator and denominator."""
    if weighted:
        return f"{n:,.0f}/{d:,.0f} ({100.0 * n / d:.1f}%)" if d else f"{n:,.0f}/0 (n/a)"
    return f"{int(n)}/{int(d)} ({100.0 * n / d:.1f}%)" if d else f"{int(n)}/0 (n/a)"


class Level(Rules):
    """One coverage level (reports/data/levels.yaml): reached when every stage in it passed."""

    name: str
    title: str
    stages: tuple[str, ...]
    skipped_ok: frozenset[str] = frozenset()
    from_fallbacks: str = ""  # stage derived from fallback counts when a tier does not record it


class Levels(Rules):
    """reports/data/levels.yaml."""

    version: int
    levels: tuple[Level, ...]


def levels() -> tuple[Level, ...]:
    return cached_rules(Levels, str(resource("reports", "data/levels.yaml"))).levels


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
    by_blame: dict[str, int] = field(default_factory=dict)  # non-passing cases per blame (BLAME_KEYS)
    models_by_blame: dict[str, int] = field(default_factory=dict)
    weight_by_blame: dict[str, float] = field(default_factory=dict)

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
    not_reached_by_blame: dict[str, int] = field(default_factory=dict)  # models per blame (BLAME_KEYS)
    cases_not_reached_by_blame: dict[str, int] = field(default_factory=dict)
    weight_not_reached_by_blame: dict[str, float] = field(default_factory=dict)

    def fmt_models(self) -> str:
        return (
            fmt_rate(self.models_reached, self.models)
            if self.models
            else fmt_rate(self.cases_reached, self.cases)
        )

    def fmt_weight(self) -> str:
        return fmt_rate(self.weight_reached, self.weight, weighted=True)

    @property
    def models_attributable(self) -> int:
        """Denominator without the models blamed on upstream or the environment."""
        base = self.models if self.models else self.cases
        by = self.not_reached_by_blame if self.models else self.cases_not_reached_by_blame
        return base - sum(by.get(b, 0) for b in EXCLUDED_BLAMES)

    @property
    def weight_attributable(self) -> float:
        return self.weight - sum(self.weight_not_reached_by_blame.get(b, 0.0) for b in EXCLUDED_BLAMES)

    def fmt_attributable(self) -> str:
        """Reached over the models not blamed on upstream/environment: the harness' and the device's share."""
        return fmt_rate(self.models_reached if self.models else self.cases_reached, self.models_attributable)


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
    backend_failures: list[dict[str, Any]] = field(default_factory=list)  # what the report leads with
    backend_failures_total: int = 0
    failures_by_blame: list[dict[str, Any]] = field(
        default_factory=list
    )  # (tier, stage, blame): cases, models

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------- stages


def _case_frame(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (tier, case): n_models and weight (the same on every stage row of a case)."""
    cases = results.groupby(["tier", "case_id"], sort=False).agg(
        n_models=("n_models", "first"), weight=("weight", "first"), traits=("traits", "first")
    )
    cases["n_models"] = cases["n_models"].fillna(0).astype(int)
    cases["weight"] = cases["weight"].fillna(0.0).astype(float)
    return cases


def blame_column(results: pd.DataFrame) -> pd.Series:
    """Each row's blame as a plain string: "" for passing rows, "none" for a non-pass nobody is blamed for."""
    blame = results["blame"] if "blame" in results else pd.Series([None] * len(results), index=results.index)
    blame = blame.astype(object).where(blame.notna(), "none").astype(str).replace("", "none")
    return blame.where(results["status"] != "pass", "")


def _by_blame(g: pd.DataFrame, column: str | None = None) -> dict[str, Any]:
    bad = g[g["_blame"] != ""]
    values = bad.groupby("_blame")[column].sum() if column else bad["_blame"].value_counts()
    return {b: (float(values.get(b, 0)) if column == "weight" else int(values.get(b, 0))) for b in BLAME_KEYS}


def stage_coverage(results: pd.DataFrame) -> list[StageCoverage]:
    out = []
    df = results.assign(
        n_models=results["n_models"].fillna(0).astype(int),
        weight=results["weight"].fillna(0.0).astype(float),
        _blame=blame_column(results),
    )
    for (tier, stage), g in df.groupby(["tier", "stage"], sort=True):
        counts = g["status"].value_counts()
        models = g.groupby("status")["n_models"].sum()
        reasons = {
            s: Counter(g.loc[g["status"] == s, "reason"].fillna("(no reason)"))
            for s in ("skipped", "not_attempted")
        }
        out.append(
            StageCoverage(
                tier=str(tier),
                stage=str(stage),
                cases=len(g),
                models=int(g["n_models"].sum()),
                weight=float(g["weight"].sum()),
                by_status={s: int(counts.get(s, 0)) for s in STATUS_VALUES},
                models_by_status={s: int(models.get(s, 0)) for s in STATUS_VALUES},
                skipped_reasons=dict(reasons["skipped"].most_common()),
                not_attempted_reasons=dict(reasons["not_attempted"].most_common()),
                by_blame=_by_blame(g),
                models_by_blame=_by_blame(g, "n_models"),
                weight_by_blame=_by_blame(g, "weight"),
            )
        )
    order = {s: i for i, s in enumerate(MODEL_STAGES)}
    return sorted(out, key=lambda s: (s.tier, order.get(s.stage, 99), s.stage))


# ---------------------------------------------------------------------------------------- levels


def _from_fallbacks(counts: list[float], ops: set[str]) -> tuple[str, str, str]:
    """A stage the tier did not record, judged from the case's fallback counts (a fallback is the
    device's: blame backend)."""
    known = [c for c in counts if c == c]  # NaN: the backend could not report
    if not known:
        return "not_attempted", "stage not recorded and no fallback count reported", "none"
    if sum(known) > 0:
        return "fail", "fallback: " + (", ".join(sorted(ops)) if ops else "unknown op"), Blame.BACKEND.value
    return "pass", "", ""


def _level_status(
    stages: dict[str, tuple[str, str, str]],
    level: Level,
    fallbacks: tuple[list[float], set[str]],
    tier_stages: set[str],
) -> tuple[str, str, str, str]:
    """(status, stage, reason, blame) of one case at one level: 'pass' or the first stage that stopped it."""
    for stage in level.stages:
        if stage == level.from_fallbacks and stage not in tier_stages:
            status, reason, blame = _from_fallbacks(*fallbacks)
        else:
            status, reason, blame = stages.get(stage, ("not_attempted", "stage not recorded", "none"))
        if status == "pass" or (status == "skipped" and stage in level.skipped_ok):
            continue
        return status, stage, reason, blame
    return "pass", "", "", ""


def case_levels(results: pd.DataFrame) -> pd.DataFrame:
    """Per model-tier case: the status of each level (columns = level names), n_models, weight, traits.

    Only cases with a `load` row are model cases; unit-tier cases have no levels.
    """
    model_cases = results.loc[results["stage"] == "load", ["tier", "case_id"]].drop_duplicates()
    if model_cases.empty:
        return pd.DataFrame()
    df = results.merge(model_cases, on=["tier", "case_id"])
    # why a stage stopped, in a form that groups: the exception type for unfinished stages, else the reason
    unfinished = (
        df["status"].isin(list(UNFINISHED_VALUES)) & df["error_class"].notna() & (df["error_class"] != "")
    )
    reason = df["reason"].where(~unfinished, df["error_class"]).fillna(df["error_class"]).fillna("")
    reason = reason.str.slice(0, 160)
    fallbacks: dict[tuple[str, str], tuple[list[float], set[str]]] = defaultdict(lambda: ([], set()))
    cols = (
        df["tier"].tolist(),
        df["case_id"].tolist(),
        df["stage"].tolist(),
        df["status"].tolist(),
        reason.tolist(),
        df["fallback_count"].astype("float64").tolist(),
        df["fallback_ops"].tolist(),
        blame_column(df).tolist(),
    )  # bulk: iterating Arrow Series is ~10x slower
    per_case: dict[tuple[str, str], dict[str, tuple[str, str, str]]] = defaultdict(dict)
    for tier, case, stage, status, why, n_fallbacks, ops, blame in zip(*cols):
        per_case[(tier, case)][stage] = (status, why, blame)
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
            status, stage, why, blame = _level_status(stages, lv, fallbacks[key], tier_stages[key[0]])
            row[lv.name], row[f"{lv.name}_stage"], row[f"{lv.name}_reason"] = status, stage, why
            row[f"{lv.name}_blame"] = blame
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
            blockers = (
                bad.groupby([f"{lv.name}_stage", lv.name, f"{lv.name}_reason", f"{lv.name}_blame"])
                .agg(cases=("case_id", "size"), models=("n_models", "sum"))
                .sort_values(["models", "cases"], ascending=False)
                .head(top_blockers)
                .reset_index()
            )
            blamed = bad.groupby(f"{lv.name}_blame").agg(
                cases=("case_id", "size"), models=("n_models", "sum"), weight=("weight", "sum")
            )
            out.append(
                LevelCoverage(
                    tier=str(tier),
                    level=lv.name,
                    title=lv.title,
                    cases=len(g),
                    models=int(g["n_models"].sum()),
                    weight=float(g["weight"].sum()),
                    cases_reached=int(ok.sum()),
                    models_reached=int(g.loc[ok, "n_models"].sum()),
                    weight_reached=float(g.loc[ok, "weight"].sum()),
                    not_reached={
                        s: int(bad.loc[bad[lv.name] == s, "n_models"].sum())
                        for s in STATUS_VALUES
                        if s != "pass" and (bad[lv.name] == s).any()
                    },
                    blockers=[
                        {
                            "stage": r[0],
                            "status": r[1],
                            "reason": r[2],
                            "blame": r[3],
                            "cases": int(r[4]),
                            "models": int(r[5]),
                        }
                        for r in blockers.itertuples(index=False)
                    ],
                    not_reached_by_blame={b: int(blamed["models"].get(b, 0)) for b in BLAME_KEYS},
                    cases_not_reached_by_blame={b: int(blamed["cases"].get(b, 0)) for b in BLAME_KEYS},
                    weight_not_reached_by_blame={b: float(blamed["weight"].get(b, 0.0)) for b in BLAME_KEYS},
                )
            )
    return out


def _trait_items(traits_json: Any) -> list[tuple[str, str]]:
    if not isinstance(traits_json, str) or not traits_json:
        return []
    try:
        traits = json.loads(traits_json)
    except ValueError:
        return []
    items = []
    for key, value in traits.items() if isinstance(traits, dict) else ():
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
    for tier, traits, n_models, weight, ok in zip(
        per_case["tier"].tolist(),
        per_case["traits"].tolist(),
        per_case["n_models"].tolist(),
        per_case["weight"].tolist(),
        reached,
    ):
        if traits not in parsed:
            parsed[traits] = _trait_items(traits)
        for trait, value in parsed[traits]:
            a = acc.setdefault((tier, trait, value), {"models": 0, "weight": 0.0, **{n: 0 for n in names}})
            a["models"] += n_models
            a["weight"] += weight
            for n, hit in zip(names, ok):
                if hit:
                    a[n] += n_models
    return [
        TraitCoverage(
            tier=k[0],
            trait=k[1],
            value=k[2],
            models=v["models"],
            weight=v["weight"],
            reached={n: v[n] for n in names},
        )
        for k, v in sorted(acc.items())
    ]


def top_fallback_ops(
    per_op: pd.DataFrame, limit: int = 20, fallbacks: pd.DataFrame | None = None
) -> list[dict[str, Any]]:
    """Ops ranked by the models they block, then by the download share they block; with the
    fallback events (fallbacks.parquet), each op also names the model lines that call it
    (`model_lines`: model frame -> cases, most cases first)."""
    if per_op.empty:
        return []
    df = per_op[per_op["cases_blocked"].fillna(0) > 0].copy()
    df["_share"] = df["download_share_blocked"].fillna(0.0)
    df = df.sort_values(
        ["models_blocked", "_share", "cases_blocked", "op"], ascending=[False, False, False, True]
    )
    cols = [
        "tier",
        "op",
        "models_blocked",
        "models_total",
        "download_share_blocked",
        "cases_blocked",
        "fallback_calls",
        "native_calls",
    ]
    lines = model_lines(fallbacks)
    out = []
    for rec in df[cols].head(limit).to_dict("records"):
        rec = {k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()}
        rec["model_lines"] = lines.get((rec["tier"], rec["op"]), [])
        out.append(rec)
    return out


_FAILURE_COLUMNS = (
    "tier",
    "case_id",
    "stage",
    "status",
    "reason",
    "error_class",
    "failing_op",
    "n_models",
    "blame_evidence",
)


def backend_failures(results: pd.DataFrame, limit: int = 200) -> tuple[list[dict[str, Any]], int]:
    """Failing rows blamed on the backend, most models first: what a backend engineer acts on."""
    if results.empty:
        return [], 0
    bad = results[(blame_column(results) == Blame.BACKEND.value) & (results["status"] != "not_attempted")]
    bad = bad.assign(n_models=bad["n_models"].fillna(0).astype(int))
    bad = bad.sort_values(["n_models", "tier", "case_id"], ascending=[False, True, True])
    cols = [c for c in _FAILURE_COLUMNS if c in bad]
    rows = [
        {k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
        for r in bad[cols].head(limit).to_dict("records")
    ]
    return rows, len(bad)


def failures_by_blame(results: pd.DataFrame) -> list[dict[str, Any]]:
    """Non-passing rows per (tier, stage, blame), with cases and models: every split of the report."""
    if results.empty:
        return []
    df = results.assign(_blame=blame_column(results), n_models=results["n_models"].fillna(0).astype(int))
    df = df[df["_blame"] != ""]
    g = df.groupby(["tier", "stage", "_blame"]).agg(cases=("case_id", "size"), models=("n_models", "sum"))
    order = {b: i for i, b in enumerate(BLAME_KEYS)}
    out = [
        {"tier": t, "stage": s, "blame": b, "cases": int(r.cases), "models": int(r.models)}
        for (t, s, b), r in g.iterrows()
    ]
    return sorted(out, key=lambda r: (r["tier"], stage_rank(r["stage"]), order.get(r["blame"], 99)))


def stage_rank(stage: str) -> int:
    return MODEL_STAGES.index(stage) if stage in MODEL_STAGES else 99


def tier_summary(results: pd.DataFrame, tier: str, case_ids: Iterable[str] | None = None) -> dict[str, Any]:
    """The `harness run --json` figures of one tier: cases by headline status, stage rows by status
    and by blame, models and downloads, and per stage the models / downloads that passed with their
    denominators (every model of the tier; `blame_shares` adds the attributable ones). `case_ids`
    restricts to a run's own cases (its --limit / --shard)."""
    df = results[results["tier"] == tier]
    if case_ids is not None:
        df = df[df["case_id"].isin(set(case_ids))]
    df = df.assign(
        _blame=blame_column(df),
        n_models=df["n_models"].fillna(0).astype(int),
        weight=df["weight"].fillna(0.0).astype(float),
    )
    statuses: dict[str, list[str]] = defaultdict(list)
    for case, status in zip(df["case_id"].tolist(), df["status"].tolist()):  # rows are in stage order
        statuses[case].append(status)
    cases = _case_frame(df) if len(df) else pd.DataFrame(columns=["n_models", "weight"])
    models, weight = int(cases["n_models"].sum()), float(cases["weight"].sum())
    by_stage: dict[str, dict[str, int]] = {}
    by_stage_blame: dict[str, dict[str, int]] = {}
    coverage: dict[str, dict[str, Any]] = {}
    for stage, g in df.groupby("stage", sort=False):
        by_stage[str(stage)] = {str(k): int(v) for k, v in sorted(g["status"].value_counts().items())}
        passed, bad = g[g["status"] == "pass"], g[g["status"] != "pass"]
        by_stage_blame[str(stage)] = {str(k): int(v) for k, v in sorted(bad["_blame"].value_counts().items())}
        c = {
            "models_pass": int(passed["n_models"].sum()),
            "weight_pass": float(passed["weight"].sum()),
            "models_by_blame": {str(k): int(v) for k, v in bad.groupby("_blame")["n_models"].sum().items()},
            "weight_by_blame": {str(k): float(v) for k, v in bad.groupby("_blame")["weight"].sum().items()},
        }
        coverage[str(stage)] = {
            "models_pass": c["models_pass"],
            "models_total": models,
            "weight_pass": c["weight_pass"],
            "weight_total": weight,
            "weighted_share": (c["weight_pass"] / weight) if weight else None,
            **blame_shares(c, models, weight),
        }
    counts = Counter(headline_status(s) for s in statuses.values())
    return {
        "tier": tier,
        "cases": len(statuses),
        "counts": dict(sorted(counts.items())),
        "by_stage": by_stage,
        "by_stage_blame": by_stage_blame,
        "models": models,
        "weight": weight,
        "coverage": coverage,
    }


def blame_shares(c: dict[str, Any], models: float, weight: float) -> dict[str, Any]:
    """A stage's non-passes by blame ("none": not a failure of anyone, e.g. not applicable) and
    the pass share over the models not blamed on upstream or the environment (their denominator)."""
    excluded_models = sum(c["models_by_blame"].get(b, 0) for b in EXCLUDED_BLAMES)
    excluded_weight = sum(c["weight_by_blame"].get(b, 0.0) for b in EXCLUDED_BLAMES)
    attributable_models, attributable_weight = models - excluded_models, weight - excluded_weight
    return {
        "models_by_blame": dict(sorted(c["models_by_blame"].items())),
        "weight_by_blame": dict(sorted(c["weight_by_blame"].items())),
        "models_attributable": int(attributable_models),
        "weight_attributable": attributable_weight,
        "attributable_share": (c["models_pass"] / attributable_models) if attributable_models else None,
        "attributable_weighted_share": (c["weight_pass"] / attributable_weight)
        if attributable_weight
        else None,
    }


def model_lines(
    fallbacks: pd.DataFrame | None, per_op: int = 3
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(tier, op) -> [{"model_frame", "cases"}]: the model code lines where the op fell back."""
    if fallbacks is None or fallbacks.empty or "model_frame" not in fallbacks.columns:
        return {}
    df = fallbacks.dropna(subset=["model_frame"])
    if df.empty:
        return {}
    counts = (
        df.groupby(["tier", "op", "model_frame"], dropna=True)["case_id"]
        .nunique()
        .reset_index(name="cases")
        .sort_values(["tier", "op", "cases", "model_frame"], ascending=[True, True, False, True])
    )
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for tier, op, frame, cases in counts.itertuples(index=False):
        bucket = out.setdefault((tier, op), [])
        if len(bucket) < per_op:
            bucket.append({"model_frame": frame, "cases": int(cases)})
    return out


def summarize(
    results: pd.DataFrame, per_op: pd.DataFrame | None = None, fallbacks: pd.DataFrame | None = None
) -> Coverage:
    per_case = case_levels(results)
    failures, total = backend_failures(results)
    return Coverage(
        run_ids=sorted(results["run_id"].dropna().unique().tolist()),
        stages=stage_coverage(results),
        levels=level_coverage(per_case),
        traits=trait_coverage(per_case),
        top_fallback_ops=top_fallback_ops(
            per_op if per_op is not None else pd.DataFrame(), fallbacks=fallbacks
        ),
        backend_failures=failures,
        backend_failures_total=total,
        failures_by_blame=failures_by_blame(results),
    )


def summarize_run(run_dir) -> Coverage:
    from reports.tables import read_table  # the only I/O, kept at the edge

    return summarize(
        read_table(run_dir, "results"), read_table(run_dir, "per_op"), read_table(run_dir, "fallbacks")
    )
