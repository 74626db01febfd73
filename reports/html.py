"""One static HTML report per run: opens from disk with no server and no network.

The first screen is what a backend engineer reads in a minute (reports.summary,
reports.rootcauses): per tier the pass shares with their denominators, the regressions against the
baseline with their root causes, the root causes (one row per op and phase), the backend failures
without one and why, and skips and fallbacks aggregated by op, dtype and reason. Below it, nothing
left out: tables and inline SVG plots (reports.plots) of pass rates per tier and stage over the last
runs, coverage levels, top fallback ops, every skip and fallback group, the upstream tier's op_db
breakdown (reports.upstream), coverage by trait, failures by root cause (reports.failure_groups),
the new failures since the baseline, and the backend-blamed rows one by one (collapsed). The page
is rendered from reports/data/report.html.jinja.

Usage::

    from reports.html import write_report
    write_report("runs/today", baseline="baseline")  # -> runs/today/report.html
"""

from __future__ import annotations

import datetime as dt
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup

from contracts.rootcause import RootCause
from contracts.status import STATUS_VALUES, Verdict
from reports import plots, rootcauses, summary, upstream
from reports.compare import RunComparison
from reports.coverage import BLAME_KEYS, Coverage, fmt_rate, levels, summarize
from reports.gate import gated, regressions
from reports.history import load_history
from reports.tables import read_table

MAX_ROWS = 200  # long lists (new failures, traits) are cut with a note saying how many were left out
FIRST_SCREEN_ROWS = 10  # rows per first-screen table; the rest is further down the page


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: resources.files("reports").joinpath(f"data/{name}").read_text()
        ),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["rate"] = fmt_rate
    env.filters["pct"] = lambda v: "n/a" if v is None else f"{100.0 * v:.1f}%"
    env.filters["root_cause"] = lambda record: _root_cause_text(record, rootcauses.describe)
    env.filters["root_cause_short"] = lambda record: _root_cause_text(record, rootcauses.short)
    env.filters["verified"] = rootcauses.verified_text
    return env


def _root_cause_text(record: dict[str, Any] | None, how) -> str:
    return how(RootCause.from_dict(record)) if record else ""


def _identity_text(rec: dict[str, Any]) -> str:
    """What was tested, from runs.parquet's backend columns: "real; torchax 0.0.13, jax 0.10.2;
    jax_enable_x64=False" ("" when the run did not record it)."""
    parts = [str(rec["backend_kind"])] if rec.get("backend_kind") else []
    for key, fmt in (("backend_versions", "{} {}"), ("backend_settings", "{}={}")):
        text = rec.get(key)
        values = json.loads(text) if isinstance(text, str) and text else {}
        if values:
            parts.append(", ".join(fmt.format(k, _short(v)) for k, v in values.items()))
    return "; ".join(parts)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _runs(run_dir: Path) -> list[dict[str, Any]]:
    runs = read_table(run_dir, "runs")
    out = []
    for rec in runs.to_dict("records"):
        rec["tiers"] = ", ".join(rec.get("tiers") if rec.get("tiers") is not None else [])
        for key in ("started_at", "finished_at"):
            value = rec.get(key)
            rec[key] = (
                value.strftime("%Y-%m-%d %H:%M:%S UTC")
                if isinstance(value, dt.datetime) and not pd.isna(value)
                else None
            )
        rec["backend_identity"] = _identity_text(rec)
        rec = {k: ("" if v is None or (isinstance(v, float) and v != v) else v) for k, v in rec.items()}
        out.append(rec)
    return out


def _tier_totals(cov: Coverage) -> list[dict[str, Any]]:
    totals: dict[str, dict[str, Any]] = {}
    for s in cov.stages:  # every stage of a tier sees the same cases: take the largest
        t = totals.setdefault(s.tier, {"tier": s.tier, "cases": 0, "models": 0, "weight": 0.0, "stages": 0})
        t["cases"], t["models"], t["weight"] = (
            max(t["cases"], s.cases),
            max(t["models"], s.models),
            max(t["weight"], s.weight),
        )
        t["stages"] += 1
    return list(totals.values())


def build_context(
    run_dir: str | os.PathLike,
    comparison: RunComparison | None = None,
    baseline_note: str = "",
    history: int = 10,
    coverage: Coverage | None = None,
    failure_groups: dict[str, Any] | None = None,
    results: pd.DataFrame | None = None,
    root_cause_groups: list[rootcauses.RootCauseGroup] | None = None,
) -> dict[str, Any]:
    """failure_groups: reports.failure_groups.write_failure_groups's result (None: section left out);
    results: the run's results table when the caller has read it already; root_cause_groups:
    reports.rootcauses.root_cause_groups(results) when the caller has them."""
    run_dir = Path(run_dir)
    if results is None:
        results = read_table(run_dir, "results")
    fallbacks = read_table(run_dir, "fallbacks")
    cov = coverage or summarize(results, read_table(run_dir, "per_op"), fallbacks)
    if root_cause_groups is None:
        root_cause_groups = rootcauses.root_cause_groups(results)
    unexplained = rootcauses.unexplained(results)
    skips_fallbacks = summary.skips_and_fallbacks(results, fallbacks)
    backends_share = summary.backends(skips_fallbacks)
    points = load_history(run_dir, limit=history)
    traits = sorted(cov.traits, key=lambda t: (t.tier, t.trait, -t.models, t.value))
    up = upstream.summarize(results)
    svgs = {
        "history": plots.history_svg(points),
        "levels": plots.levels_svg(cov.levels),
        "fallbacks": plots.fallback_svg(cov.top_fallback_ops),
        "upstream_heatmap": plots.heatmap_svg(up.heatmap) if up else None,
    }
    new_failures = (
        sorted(regressions(comparison), key=lambda v: (v.blame or "") not in ("", "backend"))
        if comparison
        else []
    )  # every regression verdict (new/changed failures, fallback regressions); the backend's first
    gating = {id(v) for v in gated(comparison, comparison.gate)} if comparison else set()
    records = rootcauses.case_records(results)
    backend_rows = [
        {**f, "root_cause": rootcauses.describe(records.get((f["tier"], f["case_id"]), {}).get(f["stage"]))}
        for f in cov.backend_failures
    ]
    blame_rows: dict[tuple[str, str], dict[str, int]] = {}
    for r in cov.failures_by_blame:
        blame_rows.setdefault((r["tier"], r["stage"]), {})[r["blame"]] = r["cases"]
    return {
        "title": f"Coverage report: {', '.join(cov.run_ids) or run_dir.name}",
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": _runs(run_dir),
        "totals": _tier_totals(cov),
        "tier_rows": summary.tier_rows(results, cov.levels),
        "show_downloads": any(lv.weight for lv in cov.levels),
        "backend_rows": backend_rows,
        "root_causes": root_cause_groups[:MAX_ROWS],
        "root_causes_left_off": max(0, len(root_cause_groups) - MAX_ROWS),
        "unexplained": unexplained[:MAX_ROWS],
        "unexplained_left_off": max(0, len(unexplained) - MAX_ROWS),
        "first_screen_rows": FIRST_SCREEN_ROWS,
        "first_regressions": sorted(new_failures, key=lambda v: id(v) not in gating)[:FIRST_SCREEN_ROWS],
        "gating_count": len(gating),
        "skips_fallbacks": skips_fallbacks[:MAX_ROWS],
        "skips_fallbacks_left_off": max(0, len(skips_fallbacks) - MAX_ROWS),
        "backend_skips_fallbacks": backends_share[:FIRST_SCREEN_ROWS],
        "backend_skips_fallbacks_total": len(backends_share),
        "coverage": cov,
        "statuses": list(STATUS_VALUES),
        "history": points,
        "traits": traits[:MAX_ROWS],
        "traits_left_off": max(0, len(traits) - MAX_ROWS),
        "svg": {k: Markup(v) if v else None for k, v in svgs.items()},
        "comparison": comparison,
        "baseline_note": baseline_note,
        "new_failures": new_failures[:MAX_ROWS],
        "new_failures_left_off": max(0, len(new_failures) - MAX_ROWS),
        "improved": comparison.of(Verdict.IMPROVED)[:MAX_ROWS] if comparison else [],
        "levels": levels(),
        "upstream": up,
        "skip_reasons": upstream.SKIP_REASONS,
        "blame_keys": list(BLAME_KEYS),
        "blame_rows": blame_rows,
        "gating_blames": ("", "backend")
        if (comparison is None or comparison.gate == "backend")
        else tuple(BLAME_KEYS) + ("",),
        "failure_groups": failure_groups,
        "failure_group_rows": (failure_groups or {}).get("groups", [])[:MAX_ROWS],
        "failure_groups_left_off": max(0, len((failure_groups or {}).get("groups", [])) - MAX_ROWS),
    }


def render(context: dict[str, Any]) -> str:
    return _env().get_template("report.html.jinja").render(**context)


def write_report(
    run_dir: str | os.PathLike,
    comparison: RunComparison | None = None,
    baseline_note: str = "",
    history: int = 10,
    out: str | os.PathLike | None = None,
    coverage: Coverage | None = None,
    failure_groups: dict[str, Any] | None = None,
    results: pd.DataFrame | None = None,
    root_cause_groups: list[rootcauses.RootCauseGroup] | None = None,
) -> Path:
    """Render run_dir's report to out (default RUNDIR/report.html), atomically."""
    path = Path(out) if out else Path(run_dir) / "report.html"
    html = render(
        build_context(
            run_dir, comparison, baseline_note, history, coverage, failure_groups, results, root_cause_groups
        )
    )
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, path)
    return path
