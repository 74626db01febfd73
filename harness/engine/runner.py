"""The tier runner: list a tier's cases, skip those already journaled, run the rest in isolated
workers, journal each outcome as it lands, then write the run's Parquet tables atomically.

Why this shape: a nightly run must be complete (one row per case and stage, whatever happened to
the case), resumable (kill it at any moment, run the same command again: it continues, no
duplicates) and comparable (stable case ids; the same tables whichever executor ran it).

A run directory holds:
    run.json          run id, backend, shard and per-tier bookkeeping (restart checks against it)
    journal.jsonl     one line per finished case (harness.engine.journal)
    workers/          one log per worker process (faulthandler stacks of crashes land here)
    runs.parquet results.parquet fallbacks.parquet per_op.parquet   (reports.tables)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from contracts.records import Case, CaseOutcome
from contracts.rows import case_rows
from contracts.settings import resolve_limits
from contracts.tiers import Tier, TierInputs, load_tier, tier_chunk_size, tier_hook, tier_option
from harness.engine import ordering
from harness.engine.executors.base import Executor
from harness.engine.journal import Journal
from harness.engine.limits import BaselineCosts, LimitSettings, Schedule, baseline_costs, marks_of
from harness.engine.ordering import DEFAULT_ORDER
from harness.engine.rerun import blamed, reference_outcomes, reference_pass
from harness.engine.workers import WorkerLimits
from harness.errors import RunDirMismatch

RUN_FILE = "run.json"
#: Blames a coverage figure's attributable denominator leaves out (not the harness', not the device's).
EXCLUDED_BLAMES = ("upstream", "environment")


@dataclass
class RunOptions:
    tier: str
    out: str | os.PathLike
    backend: str = "neuron"
    shard: tuple[int, int] | None = None  # (I, N), 1-based: this process runs shard I of N
    workers: int = 1
    executor: str = "local"
    ray_address: str | None = None
    registry: str | None = None
    models: str | None = None
    limit: int | None = None  # keep the first N cases (tiers list them in priority order)
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    run_id: str | None = None
    progress: bool = True
    tier_options: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # extra run metadata for runs.parquet
    order: str = (
        DEFAULT_ORDER  # execution order: likely failures first, or as listed (harness.engine.ordering)
    )
    baseline: str | None = (
        None  # the baseline the order learns from (None: $HARNESS_BASELINE_DIR, ./baseline)
    )
    use_baseline: bool = True
    maxfail: int | None = (
        None  # stop after N cases that regress against the baseline (harness.engine.failfast)
    )
    # ops a worker died in before this run (a nightly's earlier tiers): op -> hang | crash
    marked_ops: dict[str, str] = field(default_factory=dict)
    # the least per-case limit of this tier (None: HARNESS_CASE_LIMIT_FLOOR; harness.engine.limits)
    case_limit_floor: float | None = None


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """'I/N' with 1 <= I <= N (as in CI matrices: --shard 1/4 ... 4/4)."""
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected I/N, e.g. 1/4") from None
    if not (n >= 1 and 1 <= i <= n):
        raise ValueError(f"--shard {text!r}: need 1 <= I <= N")
    return i, n


def in_shard(case_id: str, shard: tuple[int, int] | None) -> bool:
    """Stable hash sharding: a case stays in its shard when the population grows."""
    if shard is None:
        return True
    i, n = shard
    return int(hashlib.sha1(case_id.encode()).hexdigest()[:8], 16) % n == i - 1


# ------------------------------------------------------------------------------------ run dir


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def open_run_dir(run_dir: Path, opts: RunOptions) -> dict[str, Any]:
    """Create run.json, or check a restart against it (same backend and shard)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_FILE
    shard = f"{opts.shard[0]}/{opts.shard[1]}" if opts.shard else None
    if path.exists():
        meta = json.loads(path.read_text())
        if meta.get("backend") != opts.backend:
            raise RunDirMismatch(
                f"{run_dir} holds a run on backend {meta.get('backend')!r}, not "
                f"{opts.backend!r}: use another --out"
            )
        if meta.get("shard") != shard:
            raise RunDirMismatch(f"{run_dir} holds shard {meta.get('shard')}, not {shard}: use another --out")
        if opts.run_id and meta.get("run_id") != opts.run_id:
            raise RunDirMismatch(f"{run_dir} holds run {meta.get('run_id')}, not {opts.run_id}")
        meta["restarts"] = int(meta.get("restarts", 0)) + 1
    else:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        meta = {
            "run_id": opts.run_id or f"{stamp}-{uuid.uuid4().hex[:8]}",
            "started_at": _now(),
            "backend": opts.backend,
            "shard": shard,
            "restarts": 0,
            "tiers": {},
        }
    meta.update({k: v for k, v in opts.meta.items() if k not in ("run_id", "backend", "shard", "tiers")})
    _write_json(path, meta)
    return meta


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------- rows


def write_tables(run_dir: Path, journal: Journal, meta: dict[str, Any]) -> dict[str, Path]:
    """All journaled cases of the run dir -> its Parquet tables (rewritten whole, atomically)."""
    from reports.tables import write_run_tables

    refs = reference_outcomes(run_dir)
    rows, events, native = [], [], {}
    json_cache: dict[int, str | None] = {}
    for rec in journal.records():
        case = case_rows(blamed(rec, meta.get("backend"), refs), meta["run_id"], json_cache)
        rows.extend(case.rows)
        events.extend(case.fallback_events)
        for op, n in case.native_op_calls.items():
            native[(rec["tier"], op)] = native.get((rec["tier"], op), 0) + n
    tiers = sorted({rec["tier"] for rec in journal.records()} | set(meta.get("tiers", {})))
    run_meta = {k: v for k, v in meta.items() if k != "tiers"}
    run_meta.update({"tiers": tiers, "finished_at": _now(), "tier_runs": meta.get("tiers", {})})
    started = dt.datetime.fromisoformat(meta["started_at"])
    run_meta["duration_seconds"] = (
        sum(float(t.get("seconds", 0)) for t in meta.get("tiers", {}).values())
        or (dt.datetime.now(dt.UTC) - started).total_seconds()
    )
    run_meta.setdefault("lowering_table_version", _lowering_version(journal))
    for key, value in _backend_identity(journal).items():
        run_meta.setdefault(key, value)
    return write_run_tables(run_dir, run_meta, rows, events, native)


def _lowering_version(journal: Journal) -> str | None:
    """The backend's lowering-table version as the workers reported it (the runner never imports
    the backend itself: it stays light and cannot be broken by a device extension)."""
    versions = sorted(
        {
            str(v)
            for rec in journal.records()
            if (v := (rec["outcome"].get("worker") or {}).get("lowering_table_version"))
        }
    )
    return ",".join(versions) or None


def _backend_identity(journal: Journal) -> dict[str, Any]:
    """The backend's kind, versions and settings as the workers reported them (the first worker's:
    every worker resolves the same adapter), for runs.parquet."""
    for rec in journal.records():
        found = (rec["outcome"].get("worker") or {}).get("backend_identity")
        if found:
            return {k: found.get(k) for k in ("backend_kind", "backend_versions", "backend_settings")}
    return {}


# ------------------------------------------------------------------------------------------ run


def _progress(total: int, initial: int, enabled: bool, desc: str):
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="case",
        file=sys.stderr,
        disable=not enabled,
        dynamic_ncols=True,
        smoothing=0.05,
    )


def _cases_key(opts: RunOptions) -> str:
    """What determines a tier's case list: a restart with the same key reuses the saved list."""

    def stamp(p: str | None) -> Any:
        if not p or not os.path.exists(p):
            return p
        st = os.stat(p)
        return [os.path.abspath(p), st.st_size, st.st_mtime_ns]

    key = {
        "tier": opts.tier,
        "registry": stamp(opts.registry),
        "models": stamp(opts.models),
        "limit": opts.limit,
        "shard": opts.shard,
        "options": {k: v for k, v in opts.tier_options.items() if k != "workers"},
    }
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def list_cases(
    tier: Tier, opts: RunOptions, run_dir: Path | None = None, cache_record: dict[str, Any] | None = None
) -> list[Case]:
    """The tier's cases (limit, then shard), saved in the run dir so a restart reuses the same list
    without listing again (deduplicating a large population costs minutes); a built-in tier's list
    also comes from the content-keyed listing cache (harness.engine.listing_cache) when its inputs, code
    and libraries are unchanged. `cache_record` gets the cache's status (hit/miss/corrupt/off)."""
    saved = run_dir / f"cases-{tier.name}.json" if run_dir else None
    key = _cases_key(opts)
    if saved is not None and saved.exists():
        try:
            data = json.loads(saved.read_text())
            if data.get("key") == key:
                return [Case(**c) for c in data["cases"]]
        except (ValueError, TypeError, KeyError):
            pass  # a damaged cache: list again
    from contracts.settings import current
    from contracts.tiers import tier_names
    from harness.engine.listing_cache import cached_listing

    settings = current()
    cases, record = cached_listing(
        opts,
        settings.cache_dir if settings.listing_cache else None,
        opts.tier in tier_names(),
        lambda: _list_cases(tier, opts),
    )
    if cache_record is not None:
        cache_record.update(record)
    if saved is not None:
        tmp = saved.with_name(f".{saved.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "cases": [asdict(c) for c in cases]}, default=str))
        os.replace(tmp, saved)
    return cases


def _list_cases(tier: Tier, opts: RunOptions) -> list[Case]:
    inputs = TierInputs(
        backend=opts.backend,
        registry=opts.registry,
        models=opts.models,
        options={"workers": opts.workers, "limit": opts.limit, **opts.tier_options},
    )
    cases, seen = [], set()
    for c in tier.cases(inputs):
        if c.case_id in seen:  # a tier listing a case twice would break one-row-per-case: keep the first
            print(
                f"warning: tier {tier.name} lists case {c.case_id!r} twice; keeping the first",
                file=sys.stderr,
            )
            continue
        seen.add(c.case_id)
        cases.append(c)
    if opts.limit is not None:
        cases = cases[: opts.limit]
    return [c for c in cases if in_shard(c.case_id, opts.shard)]


def run_tier(opts: RunOptions) -> dict[str, Any]:
    """Run (or continue) one tier into opts.out; returns the summary printed by `--json`."""
    from harness.engine.executors import make_executor

    t0 = time.monotonic()
    run_dir = Path(opts.out)
    tier = load_tier(opts.tier)
    meta = open_run_dir(run_dir, opts)
    # local workers report the op fingerprints with their start-up (LocalExecutor.fingerprints);
    # other executors' runs probe them in a process of their own, in parallel with the listing
    probe = None if opts.executor == "local" else ordering.start_probe(opts.backend)
    timeout, max_cases = resolve_limits(tier, opts.limits.timeout, opts.limits.max_cases)

    def new_executor() -> Executor:
        return make_executor(
            opts.executor,
            opts.tier,
            opts.backend,
            opts.workers,
            replace(opts.limits, timeout=timeout, max_cases=max_cases),
            log_dir=run_dir / "workers",
            ray_address=opts.ray_address,
            sys_path=list(sys.path),
        )

    # local workers start up (interpreter, torch, tier setup) while the cases are listed; other
    # executors (Ray starts a cluster) are made only when there is something to run
    executor = new_executor() if opts.executor == "local" else None
    try:
        return _run_listed(tier, opts, run_dir, meta, probe, executor, new_executor, t0)
    finally:
        if executor is not None:
            executor.close()  # pre-started workers no chunk needed


def _run_listed(
    tier: Tier,
    opts: RunOptions,
    run_dir: Path,
    meta: dict[str, Any],
    probe: ordering.ProbeKey | None,
    executor: Executor | None,
    new_executor: Callable[[], Executor],
    t0: float,
) -> dict[str, Any]:
    """run_tier after the run dir is open: `executor` is the pre-started executor, or None to make
    one with `new_executor` only when there is something to run."""
    journal = Journal(run_dir)
    if not journal.done(tier.name) and executor is not None:  # a fresh run dir: every case will run
        executor.prestart()  # first: the workers' start-up overlaps reading the baseline and listing
    try:
        stop = _stop_at_regressions(tier.name, opts)  # pandas + the baseline's tables: seconds
        listing_cache: dict[str, Any] = {"status": "restart"}  # the run dir's own list, unless listed below
        cases = list_cases(tier, opts, run_dir, listing_cache)
    except BaseException:
        journal.close()
        raise
    list_seconds = time.monotonic() - t0
    waited = [0.0]

    def fingerprints(start: bool = True) -> dict[str, Any] | None:
        """The fingerprints, waited for only when asked: ordering asks only when the baseline has
        fingerprints to compare with, so they never delay the first case otherwise. A local run's
        first worker reports them with its start-up (`start`: start it to ask, as the cases need it)."""
        t_probe = time.monotonic()
        value = executor.fingerprints(start) if executor is not None else None
        if value is None:  # not a local run, or its worker had none: a probe process of its own
            value = ordering.finish_probe(probe if probe is not None else ordering.start_probe(opts.backend))
        waited[0] += time.monotonic() - t_probe
        return value or None  # {}: the backend has none

    try:
        done = journal.done(tier.name)
        why: dict[str, dict[str, Any]] = {}
        todo = ordering.execution_order(
            tier.name, [c for c in cases if c.case_id not in done], opts, run_dir, fingerprints, why
        )
        wanted = {c.case_id for c in cases}
        by_id = {c.case_id: c for c in cases}
        schedule = _schedule(tier, opts, cases, journal, why)
        chunks = schedule.plan(todo, tier_chunk_size(tier))
        counts: Counter[str] = Counter(
            CaseOutcome.from_dict(r["outcome"]).status
            for r in journal.records(tier.name)
            if r["case_id"] in wanted
        )
        bar = _progress(len(cases), len(cases) - len(todo), opts.progress, tier.name)
        bar.set_postfix(dict(counts), refresh=False)

        def on_results(outcomes: list[CaseOutcome]) -> None:
            journal.append_many(
                {"tier": o.tier, "case_id": o.case_id, "outcome": o.to_dict()} for o in outcomes
            )
            counts.update(o.status for o in outcomes)
            schedule.observe(outcomes, by_id)
            bar.set_postfix(dict(sorted(counts.items())), refresh=False)
            bar.update(len(outcomes))
            if stop is not None and not stop.reached and stop.add(outcomes):
                executor.drain()  # no new chunk; those running finish and are journaled

        if chunks:
            if executor is None:  # made only when there is something to run
                executor = new_executor()
            executor.run(chunks, on_results, plan=schedule)
        bar.close()
        not_run = len(todo) - sum(
            1 for r in journal.records(tier.name) if r["case_id"] in wanted and r["case_id"] not in done
        )
        fp = fingerprints(
            start=False
        )  # finished long ago, as a rule: runs.parquet keeps them for the next run's order
        if fp:
            meta[ordering.FINGERPRINT_KEY] = fp
        seconds = time.monotonic() - t0
        tier_meta = meta["tiers"].setdefault(tier.name, {})
        tier_meta.update(
            {
                "tier_ref": opts.tier,
                "cases": len(cases),
                "seconds": tier_meta.get("seconds", 0.0) + seconds,
                "executor": opts.executor,
                "workers": opts.workers,
                "inputs": {"registry": opts.registry, "models": opts.models, "limit": opts.limit},
                "limits": schedule.summary(),
            }
        )
        _write_json(run_dir / RUN_FILE, meta)
        t_ref = time.monotonic()
        tier_meta.update(reference_pass(tier, opts, journal, cases, run_dir))
        timings = {
            "list_seconds": round(list_seconds, 3),
            "probe_seconds": round(waited[0], 3),
            "reference_seconds": round(time.monotonic() - t_ref, 3),
            "listing_cache": listing_cache.get("status"),
        }
        tier_meta["timings"] = timings
        _write_json(run_dir / RUN_FILE, meta)
        t_tables = time.monotonic()
        paths = write_tables(run_dir, journal, meta)
        timings["tables_seconds"] = round(time.monotonic() - t_tables, 3)
        own_figures = tier_hook(tier, "summarize")
        own_records = [r for r in journal.records(tier.name) if r["case_id"] in wanted] if own_figures else []
    finally:
        journal.close()
    from reports.coverage import tier_summary
    from reports.tables import read_results

    t_summary = time.monotonic()
    summary = tier_summary(read_results(run_dir), tier.name, wanted)
    timings["summary_seconds"] = round(time.monotonic() - t_summary, 3)
    timings["wall_seconds"] = round(time.monotonic() - t0, 3)
    _write_json(run_dir / RUN_FILE, meta)
    if own_figures is not None:  # a tier's own figures (the unit tier: shape scaling)
        summary.update(own_figures(own_records))
    summary.update(
        {
            "run_id": meta["run_id"],
            "run_dir": str(run_dir),
            "backend": opts.backend,
            "shard": meta.get("shard"),
            "executor": opts.executor,
            "workers": opts.workers,
            "resumed": len(cases) - len(todo),
            "ran": len(todo) - not_run,
            "seconds": round(seconds, 3),
            **timings,
            "results": str(paths["results"]),
            "marked_ops": dict(sorted(schedule.marks.items())),
        }
    )
    if stop is not None:
        summary["stopped"] = stop.summary(not_run) if stop.reached else None
    return summary


def _baseline_path(opts: RunOptions) -> Any:
    """The baseline a run learns from: --baseline, else the configured directory (unless off)."""
    from contracts.settings import current

    return opts.baseline or (current().baseline_dir if opts.use_baseline else None)


def _schedule(
    tier: Tier, opts: RunOptions, cases: list[Case], journal: Journal, why: dict[str, dict[str, Any]]
) -> Schedule:
    """The run's limits (what each case cost in the baseline) and marks (ops workers died in: the
    baseline's, the nightly's earlier tiers', this run's before a restart); harness.engine.limits."""
    timeout, _ = resolve_limits(tier, opts.limits.timeout, opts.limits.max_cases)
    path = _baseline_path(opts)
    costs = baseline_costs(path, tier.name) if path else BaselineCosts()
    marks = {**costs.marks, **opts.marked_ops}
    for rec in journal.records(tier.name):
        marks.update(marks_of(CaseOutcome.from_dict(rec["outcome"])))
    suspects = [cid for cid, w in why.items() if w.get("class") == "changed_op"]
    settings = LimitSettings.current()
    if opts.case_limit_floor:
        settings = replace(settings, floor=float(opts.case_limit_floor))
    if not tier_option(tier, "localizes"):
        settings = replace(settings, localize=0.0)
    return Schedule(timeout, costs, settings, marks, suspects, _RecordedOps(opts, cases))


class _RecordedOps:
    """The ops a model case runs, as the shape registry recorded them (harness.engine.ordering.OpIndex),
    read once, when the run first asks (only once an op is marked)."""

    def __init__(self, opts: RunOptions, cases: list[Case]) -> None:
        self.registry, self.cases = opts.registry, cases
        self.index: ordering.OpIndex | None = None

    def __call__(self, case: Case) -> frozenset[str]:
        if self.index is None:
            self.index = ordering.OpIndex.from_registry(self.registry, ordering.model_types_of(self.cases))
        return self.index.ops_of(case)


def _stop_at_regressions(tier: str, opts: RunOptions) -> Any:
    """The fail-fast tracker of `--maxfail N` (None without it): the baseline is --baseline, else
    the configured baseline directory, which must hold results of this tier."""
    if not opts.maxfail:
        return None
    from harness.engine.failfast import StopAtRegressions, baseline_results

    if opts.maxfail < 1:
        raise ValueError("--maxfail must be at least 1")
    path = _baseline_path(opts)
    if not path:
        raise ValueError("--maxfail/--exitfirst stop at regressions against a baseline: give --baseline DIR")
    return StopAtRegressions(
        baseline_results(path, tier), opts.maxfail, baseline=str(path), backend=opts.backend
    )
