"""The nightly job: every tier (unit, representative, full, upstream) into one directory, then the HTML
report and the baseline comparison.

Why: what users run every night must be one command that always ends with a complete, comparable
result. Each tier runs into DIR/<tier>/ (a resumable run directory, all sharing one run id), a
tier that cannot run at all is recorded and the others still run, then `harness report` writes
DIR/report.html, JUnit XML and DIR/failure_groups.json (failures by probable root cause) and the
comparison with the baseline decides the exit code. Settings per mode (limits, timeouts) are data:
harness/data/nightly.toml (or `--config TOML`), loaded into `NightlyConfig`. `--models CRAWL` (a
crawl store directory) also gives the representative tier its models: the crawl is classified
and its representatives selected (agents.classify, agents.select) unless a current selection is
already there. A limited tier (the quick nightly) keeps the cases chosen for coverage (the unit
tier: every (op, dtype) before any repeats; the model tiers: harness.tiers.quick_subset).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from contracts.errors import RuleFileError
from contracts.rulefiles import Rules, load_rules, resource
from harness.engine.runner import RunOptions, parse_shard, run_tier
from harness.engine.workers import WorkerLimits

NIGHTLY_FILE = "nightly.json"


DEFAULT_TIERS = ("unit", "representative", "full", "upstream")


class TierSettings(Rules):
    """One tier's settings in a mode (`[quick.unit]`); flags given on the command line win."""

    limit: int | None = Field(default=None, ge=0)  # the tier's first N cases
    timeout: float | None = Field(default=None, gt=0)  # seconds per case
    max_cases_per_worker: int | None = Field(default=None, ge=1)
    shard: str | None = None  # "I/N", as `harness run --shard`
    models: str | None = None  # the tier's models (a file or crawl dir)
    registry: str | None = None
    ops: str | None = None  # the upstream tier's op_db subset (comma-separated OpInfo names)
    dtypes: str | None = None
    case_limit_floor: float | None = Field(default=None, gt=0)  # least per-case limit (cold starts)

    def options(self) -> dict[str, str]:
        """What the tier itself is given (`tier_options`)."""
        return {k: v for k, v in (("ops", self.ops), ("dtypes", self.dtypes)) if v is not None}


class NightlyMode(Rules):
    """A mode's section (`[full]`, `[quick]`): the tiers in order, and a table of settings per tier,
    keyed by the tier's name (plug-in tiers included: `["quick"."pkg.mod:TIER"]`)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, TierSettings] = Field(init=False)

    tiers: tuple[str, ...] = DEFAULT_TIERS

    @model_validator(mode="after")
    def _tables_of_listed_tiers(self) -> NightlyMode:
        stray = sorted(set(self.model_extra or {}) - set(self.tiers))
        if stray:
            raise ValueError(f"settings for {stray}, which `tiers` does not list (a misspelt tier?)")
        return self

    def tier(self, name: str) -> TierSettings:
        return (self.model_extra or {}).get(name) or TierSettings()


class NightlyConfig(Rules):
    """harness/data/nightly.toml, or a user's `--config TOML` of the same shape."""

    full: NightlyMode | None = None
    quick: NightlyMode | None = None


def load_config(quick: bool, path: str | os.PathLike | None = None) -> NightlyMode:
    """The settings of one mode (RuleFileError for an unknown key or a missing section)."""
    path = path or resource("harness", "data/nightly.toml")
    config = load_rules(NightlyConfig, path)
    mode = "quick" if quick else "full"
    section = getattr(config, mode)
    if section is None:
        raise RuleFileError(str(path), [f"no [{mode}] section"])
    return section


@dataclass
class NightlyOptions:
    out: str | os.PathLike
    quick: bool = False
    backend: str = "neuron"
    workers: int = 1
    executor: str = "local"
    ray_address: str | None = None
    registry: str | None = None
    representatives: str | None = None
    models: str | None = None
    baseline: str | None = None
    use_baseline: bool = True
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    timeout: float | None = None  # overrides the config's and the tiers' per-case timeouts
    max_cases: int | None = None  # overrides the tiers' recycling period
    progress: bool = True
    config_path: str | None = None
    order: str = "likely-failures"  # execution order within each tier (harness.engine.ordering)


def _run_id(out: Path) -> str:
    """One run id for every tier of the night; kept across restarts of the same DIR."""
    marker = out / NIGHTLY_FILE
    if marker.exists():
        return json.loads(marker.read_text())["run_id"]
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    run_id = f"nightly-{stamp}-{uuid.uuid4().hex[:8]}"
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"run_id": run_id}))
    return run_id


def run_nightly(opts: NightlyOptions) -> dict[str, Any]:
    """Run the tiers, the report and the comparison; returns the `--json` object."""
    from contracts.settings import resolve_limits
    from contracts.tiers import load_tier

    t_start = time.monotonic()
    out = Path(opts.out)
    config = load_config(opts.quick, opts.config_path)
    run_id = _run_id(out)
    tiers: dict[str, Any] = {}
    marked: dict[str, str] = {}  # ops a worker died in, passed to the tiers after (harness.engine.limits)
    try:
        selection = crawl_representatives(opts)
    except Exception as exc:  # noqa: BLE001 - the representative tier is recorded as unable to run
        selection = {"source": "crawl", "dir": None, "error": f"{type(exc).__name__}: {exc}"}
    if selection.get("dir"):
        opts = replace(opts, representatives=selection["dir"])
    for name in config.tiers:
        tcfg = config.tier(name)
        if name == "representative" and selection.get("error"):
            tiers[name] = {
                "tier": name,
                "error": f"selecting representatives from {opts.models} failed: {selection['error']}",
            }
            continue
        try:
            tier = load_tier(name)
            timeout, max_cases = resolve_limits(
                tier,
                opts.timeout or tcfg.timeout or opts.limits.timeout,
                opts.max_cases or tcfg.max_cases_per_worker or opts.limits.max_cases,
            )
            models = {"representative": opts.representatives, "full": opts.models}.get(name) or tcfg.models
            run_opts = RunOptions(
                tier=name,
                out=out / tier.name,
                backend=opts.backend,
                workers=opts.workers,
                executor=opts.executor,
                ray_address=opts.ray_address,
                registry=opts.registry or tcfg.registry,  # model tiers: coverage order
                models=models,
                limit=tcfg.limit,
                limits=replace(opts.limits, timeout=timeout, max_cases=max_cases),
                shard=parse_shard(tcfg.shard),
                run_id=run_id,
                progress=opts.progress,
                order=opts.order,
                baseline=opts.baseline,
                use_baseline=opts.use_baseline,
                tier_options=tcfg.options(),
                meta={"nightly": "quick" if opts.quick else "full"},
                marked_ops=dict(marked),
                case_limit_floor=tcfg.case_limit_floor,
            )
            tiers[tier.name] = run_tier(run_opts)
            for op, kind in (tiers[tier.name].get("marked_ops") or {}).items():
                marked.setdefault(op, kind)
        except Exception as exc:  # noqa: BLE001 - one tier that cannot run must not lose the others
            tiers[name] = {"tier": name, "error": f"{type(exc).__name__}: {exc}"}
    result: dict[str, Any] = {
        "run_id": run_id,
        "out": str(out),
        "mode": "quick" if opts.quick else "full",
        "backend": opts.backend,
        "tiers": tiers,
        "representatives": selection,
        "tier_errors": sorted(n for n, t in tiers.items() if "error" in t),
    }
    t_report = time.monotonic()
    result.update(_report(out, opts))
    result["report_seconds"] = round(time.monotonic() - t_report, 3)
    result["seconds"] = round(time.monotonic() - t_start, 3)
    _record_timings(out, result)
    gated = result.get("gated_failures")
    failed = bool(result["tier_errors"]) or bool(result.get("new_failures") if gated is None else gated)
    result["exit_code"] = 1 if failed else 0
    return result


def _record_timings(out: Path, result: dict[str, Any]) -> None:
    """The night's wall times in DIR/nightly.json beside its run id (benchmarks/nightly_time.py reads
    them; the tiers' own stage times are in DIR/<tier>/run.json)."""
    marker = out / NIGHTLY_FILE
    data = json.loads(marker.read_text()) if marker.exists() else {}
    data["timings"] = {
        "seconds": result["seconds"],
        "report_seconds": result["report_seconds"],
        "tiers": {n: t.get("wall_seconds") for n, t in result["tiers"].items()},
    }
    tmp = marker.with_name(f".{marker.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, marker)


def crawl_representatives(opts: NightlyOptions) -> dict[str, Any]:
    """Where the representative tier's models come from: `--representatives DIR`, else the crawl
    given as `--models DIR` (classified and selected here when its representatives.parquet is
    missing or older than its models.parquet), else the offline catalog's representatives."""
    if opts.representatives:
        return {"source": "selection", "dir": str(opts.representatives)}
    crawl = Path(opts.models) if opts.models else None
    if crawl is None or not (crawl / "models.parquet").is_file():
        note = (
            "offline catalog"
            if crawl is None
            else f"offline catalog ({crawl} is not a crawl store directory)"
        )
        return {"source": note, "dir": None}
    from agents.select import REPRESENTATIVES_FILE

    reps, store = crawl / REPRESENTATIVES_FILE, crawl / "models.parquet"
    if reps.is_file() and reps.stat().st_mtime >= store.stat().st_mtime:
        return {"source": "crawl", "dir": str(crawl), "selected": False}
    from agents.classify import classify_store
    from agents.select import select, write_selection

    frame, _ = classify_store(crawl, progress=opts.progress)
    selection = select(frame)
    write_selection(crawl, selection)
    return {
        "source": "crawl",
        "dir": str(crawl),
        "selected": True,
        "representatives": len(selection.representatives),
        "covered": selection.covered,
        "universe": selection.universe,
    }


def _report(out: Path, opts: NightlyOptions) -> dict[str, Any]:
    """HTML + JUnit (harness report) and new failures against the baseline (harness compare)."""
    try:
        from reports.build import build_report

        rep = build_report(out, opts.baseline, opts.use_baseline)
    except Exception as exc:  # noqa: BLE001 - results are on disk even if the report fails
        return {"report_html": None, "report_error": f"{type(exc).__name__}: {exc}", "new_failures": None}
    return {
        "report_html": rep["report_html"],
        "junit": rep["junit"],
        "baseline": rep["baseline"],
        "new_failures": rep["new_failures"],
        "failure_groups": rep.get("failure_groups"),
        "gated_failures": rep.get("gated_failures"),
        "new_failures_by_blame": rep.get("new_failures_by_blame"),
        "backend_failures": rep.get("backend_failures"),
    }
