"""The tier runner: list a tier's cases, skip those already journaled, run the rest in isolated
workers, journal each outcome as it lands, then write the run's Parquet tables atomically.

Why this shape: a nightly run must be complete (one row per case and stage, whatever happened to
the case), resumable (kill it at any moment, run the same command again: it continues, no
duplicates) and comparable (stable case ids; the same tables whichever executor ran it).

A run directory holds:
    run.json          run id, backend, shard and per-tier bookkeeping (restart checks against it)
    journal.jsonl     one line per finished case (harness.journal)
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
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from contracts.records import Case, CaseOutcome
from contracts.settings import resolve_limits
from harness.journal import Journal
from harness.reference import blamed, reference_outcomes, reference_pass
from harness.tiers import TierInputs, load_tier, tier_chunk_size
from harness.workers import WorkerLimits

RUN_FILE = "run.json"
#: Blames a coverage figure's attributable denominator leaves out (not the harness', not the device's).
EXCLUDED_BLAMES = ("upstream", "environment")


class RunDirMismatch(ValueError):
    """The run directory was started with other settings (backend, shard): refuse to mix them."""


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
    return dt.datetime.now(dt.timezone.utc).isoformat()


def open_run_dir(run_dir: Path, opts: RunOptions) -> dict[str, Any]:
    """Create run.json, or check a restart against it (same backend and shard)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_FILE
    shard = f"{opts.shard[0]}/{opts.shard[1]}" if opts.shard else None
    if path.exists():
        meta = json.loads(path.read_text())
        if meta.get("backend") != opts.backend:
            raise RunDirMismatch(f"{run_dir} holds a run on backend {meta.get('backend')!r}, not "
                                 f"{opts.backend!r}: use another --out")
        if meta.get("shard") != shard:
            raise RunDirMismatch(f"{run_dir} holds shard {meta.get('shard')}, not {shard}: use another --out")
        if opts.run_id and meta.get("run_id") != opts.run_id:
            raise RunDirMismatch(f"{run_dir} holds run {meta.get('run_id')}, not {opts.run_id}")
        meta["restarts"] = int(meta.get("restarts", 0)) + 1
    else:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        meta = {"run_id": opts.run_id or f"{stamp}-{uuid.uuid4().hex[:8]}", "started_at": _now(),
                "backend": opts.backend, "shard": shard, "restarts": 0, "tiers": {}}
    meta.update({k: v for k, v in opts.meta.items() if k not in ("run_id", "backend", "shard", "tiers")})
    _write_json(path, meta)
    return meta


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------- rows

def outcome_rows(record: dict[str, Any], run_id: str, backend: str | None = None,
                 references: dict[tuple[str, str], CaseOutcome] | None = None) -> list[dict[str, Any]]:
    """A journal record -> results rows (reports.schema.RESULTS), one per stage.

    Case-level fallback totals go on the `on_device` row (the last row when the tier has none)
    unless a stage reports its own, so summing fallback_count over rows counts each call once.
    Fallback events ride on the first row (reports.tables attributes them to the case). Every
    row that does not pass gets its `blame` (harness.blame; `references`: the reference pass).
    """
    out = blamed(record, backend, references or {})
    info = out.info or {}
    names = [s["stage"] for s in out.stages]
    totals_on = "on_device" if "on_device" in names else (names[-1] if names else None)
    model_id = info.get("model_id") or (out.model_ids[0] if out.model_ids else None)
    extra = {k: info[k] for k in ("model_type", "architecture", "parameters", "signature", "family") if info.get(k)}
    labels = {k: info.get(k) for k in ("op", "dtype", "variant", "sample")}  # upstream tier: the OpInfo sample
    extra.update({"case_status": out.status, "worker": out.worker, "case_seconds": out.seconds})
    rows = []
    for n, st in enumerate(out.stages):
        metrics = dict(st.get("metrics") or {})
        row = {
            "run_id": run_id, "tier": out.tier, "case_id": out.case_id, "stage": st["stage"],
            "status": st["status"], "reason": st.get("reason"), "error_class": st.get("error_class"),
            "message": st.get("message"), "failing_op": st.get("failing_op"), "seconds": st.get("seconds"),
            "model_id": model_id, "model_ids": list(out.model_ids), "weight": out.weight,
            "peak_memory_bytes": out.peak_memory_bytes, "traits": info.get("traits"), "metrics": metrics,
            "extra": extra, **labels, "blame": st.get("blame") or None,
            "blame_evidence": st.get("blame_evidence") or None,
        }
        if "fallback_count" in metrics or "fallback_ops" in metrics:
            row["fallback_count"] = metrics.pop("fallback_count", None)
            row["fallback_ops"] = list(metrics.pop("fallback_ops", None) or [])
        elif st["stage"] == totals_on:
            row["fallback_count"], row["fallback_ops"] = out.fallback_count, list(out.fallback_ops)
        if st["stage"] == "compile":
            row["graphs"], row["recompiles"] = info.get("graphs"), info.get("recompiles")
        if "native_op_calls" in metrics:
            row["native_op_calls"] = metrics.pop("native_op_calls")
        if n == 0 and out.fallback_events:
            row["fallback_events"] = [{"model_id": model_id, **e} for e in out.fallback_events]
        rows.append(row)
    return rows


def write_tables(run_dir: Path, journal: Journal, meta: dict[str, Any]) -> dict[str, Path]:
    """All journaled cases of the run dir -> its Parquet tables (rewritten whole, atomically)."""
    from reports.tables import write_run_tables

    refs = reference_outcomes(run_dir)
    rows = [r for rec in journal.records() for r in outcome_rows(rec, meta["run_id"], meta.get("backend"), refs)]
    tiers = sorted({rec["tier"] for rec in journal.records()} | set(meta.get("tiers", {})))
    run_meta = {k: v for k, v in meta.items() if k != "tiers"}
    run_meta.update({"tiers": tiers, "finished_at": _now(), "tier_runs": meta.get("tiers", {})})
    started = dt.datetime.fromisoformat(meta["started_at"])
    run_meta["duration_seconds"] = sum(float(t.get("seconds", 0)) for t in meta.get("tiers", {}).values()) \
        or (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    run_meta.setdefault("lowering_table_version", _lowering_version(journal))
    return write_run_tables(run_dir, run_meta, rows)


def _lowering_version(journal: Journal) -> str | None:
    """The backend's lowering-table version as the workers reported it (the runner never imports
    the backend itself: it stays light and cannot be broken by a device extension)."""
    versions = sorted({str(v) for rec in journal.records()
                       if (v := (rec["outcome"].get("worker") or {}).get("lowering_table_version"))})
    return ",".join(versions) or None


# -------------------------------------------------------------------------------------- summary

def summarize(records: list[dict[str, Any]], tier: str, backend: str | None = None,
              references: dict[tuple[str, str], CaseOutcome] | None = None) -> dict[str, Any]:
    """Counts with their denominators: cases by headline status, rows by stage, models, downloads;
    every stage's non-passes split by blame (cases, models, downloads)."""
    counts: Counter[str] = Counter()
    by_stage: dict[str, Counter[str]] = defaultdict(Counter)
    by_blame: dict[str, Counter[str]] = defaultdict(Counter)
    cov: dict[str, dict[str, Any]] = defaultdict(lambda: {"models_pass": 0, "weight_pass": 0.0,
                                                          "models_by_blame": Counter(), "weight_by_blame": Counter()})
    models = weight = 0.0
    for rec in records:
        out = blamed(rec, backend, references or {})
        counts[out.status] += 1
        models += len(out.model_ids)
        weight += out.weight
        for st in out.stages:
            c = cov[st["stage"]]
            by_stage[st["stage"]][st["status"]] += 1
            if st["status"] == "pass":
                c["models_pass"] += len(out.model_ids)
                c["weight_pass"] += out.weight
            else:
                key = st.get("blame") or "none"
                by_blame[st["stage"]][key] += 1
                c["models_by_blame"][key] += len(out.model_ids)
                c["weight_by_blame"][key] += out.weight
    coverage = {}
    for stage in by_stage:
        c = cov[stage]
        coverage[stage] = {"models_pass": int(c["models_pass"]), "models_total": int(models),
                           "weight_pass": c["weight_pass"], "weight_total": weight,
                           "weighted_share": (c["weight_pass"] / weight) if weight else None,
                           **blame_shares(c, models, weight)}
    return {"tier": tier, "cases": len(records), "counts": dict(sorted(counts.items())),
            "by_stage": {s: dict(sorted(c.items())) for s, c in by_stage.items()},
            "by_stage_blame": {s: dict(sorted(c.items())) for s, c in by_blame.items()},
            "models": int(models), "weight": weight, "coverage": coverage}


def blame_shares(c: dict[str, Any], models: float, weight: float) -> dict[str, Any]:
    """A stage's non-passes by blame ("none": not a failure of anyone, e.g. not applicable) and
    the pass share over the models not blamed on upstream or the environment (their denominator)."""
    excluded_models = sum(c["models_by_blame"].get(b, 0) for b in EXCLUDED_BLAMES)
    excluded_weight = sum(c["weight_by_blame"].get(b, 0.0) for b in EXCLUDED_BLAMES)
    attributable_models, attributable_weight = models - excluded_models, weight - excluded_weight
    return {"models_by_blame": dict(sorted(c["models_by_blame"].items())),
            "weight_by_blame": dict(sorted(c["weight_by_blame"].items())),
            "models_attributable": int(attributable_models), "weight_attributable": attributable_weight,
            "attributable_share": (c["models_pass"] / attributable_models) if attributable_models else None,
            "attributable_weighted_share": (c["weight_pass"] / attributable_weight) if attributable_weight else None}


# ------------------------------------------------------------------------------------------ run

def _progress(total: int, initial: int, enabled: bool, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="case", file=sys.stderr, disable=not enabled,
                dynamic_ncols=True, smoothing=0.05)


def _cases_key(opts: RunOptions) -> str:
    """What determines a tier's case list: a restart with the same key reuses the saved list."""
    def stamp(p: str | None) -> Any:
        if not p or not os.path.exists(p):
            return p
        st = os.stat(p)
        return [os.path.abspath(p), st.st_size, st.st_mtime_ns]

    key = {"tier": opts.tier, "registry": stamp(opts.registry), "models": stamp(opts.models), "limit": opts.limit,
           "shard": opts.shard, "options": {k: v for k, v in opts.tier_options.items() if k != "workers"}}
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def list_cases(tier: Any, opts: RunOptions, run_dir: Path | None = None) -> list[Case]:
    """The tier's cases (limit, then shard), saved in the run dir so a restart reuses the same list
    without listing again (deduplicating a large population costs minutes)."""
    saved = run_dir / f"cases-{tier.name}.json" if run_dir else None
    key = _cases_key(opts)
    if saved is not None and saved.exists():
        try:
            data = json.loads(saved.read_text())
            if data.get("key") == key:
                return [Case(**c) for c in data["cases"]]
        except (ValueError, TypeError, KeyError):
            pass  # a damaged cache: list again
    cases = _list_cases(tier, opts)
    if saved is not None:
        tmp = saved.with_name(f".{saved.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "cases": [asdict(c) for c in cases]}, default=str))
        os.replace(tmp, saved)
    return cases


def _list_cases(tier: Any, opts: RunOptions) -> list[Case]:
    inputs = TierInputs(backend=opts.backend, registry=opts.registry, models=opts.models,
                        options={"workers": opts.workers, "limit": opts.limit, **opts.tier_options})
    cases, seen = [], set()
    for c in tier.cases(inputs):
        if c.case_id in seen:  # a tier listing a case twice would break one-row-per-case: keep the first
            print(f"warning: tier {tier.name} lists case {c.case_id!r} twice; keeping the first",
                  file=sys.stderr)
            continue
        seen.add(c.case_id)
        cases.append(c)
    if opts.limit is not None:
        cases = cases[: opts.limit]
    return [c for c in cases if in_shard(c.case_id, opts.shard)]


def run_tier(opts: RunOptions) -> dict[str, Any]:
    """Run (or continue) one tier into opts.out; returns the summary printed by `--json`."""
    from harness.executors import make_executor

    t0 = time.monotonic()
    run_dir = Path(opts.out)
    tier = load_tier(opts.tier)
    meta = open_run_dir(run_dir, opts)
    cases = list_cases(tier, opts, run_dir)
    list_seconds = time.monotonic() - t0
    journal = Journal(run_dir)
    try:
        done = journal.done(tier.name)
        todo = [c for c in cases if c.case_id not in done]
        wanted = {c.case_id for c in cases}
        size = tier_chunk_size(tier)
        chunks = [(todo[i: i + size], size > 1) for i in range(0, len(todo), size)]
        counts: Counter[str] = Counter(CaseOutcome.from_dict(r["outcome"]).status
                                       for r in journal.records(tier.name) if r["case_id"] in wanted)
        bar = _progress(len(cases), len(cases) - len(todo), opts.progress, tier.name)
        bar.set_postfix(dict(counts), refresh=False)

        def on_results(outcomes: list[CaseOutcome]) -> None:
            journal.append_many({"tier": o.tier, "case_id": o.case_id, "outcome": o.to_dict()} for o in outcomes)
            counts.update(o.status for o in outcomes)
            bar.set_postfix(dict(sorted(counts.items())), refresh=False)
            bar.update(len(outcomes))

        if chunks:
            timeout, max_cases = resolve_limits(tier, opts.limits.timeout, opts.limits.max_cases)
            limits = replace(opts.limits, timeout=timeout, max_cases=max_cases)
            executor = make_executor(opts.executor, opts.tier, opts.backend, opts.workers, limits,
                                     log_dir=run_dir / "workers", ray_address=opts.ray_address,
                                     sys_path=list(sys.path))
            executor.run(chunks, on_results)
        bar.close()
        seconds = time.monotonic() - t0
        tier_meta = meta["tiers"].setdefault(tier.name, {})
        tier_meta.update({"tier_ref": opts.tier, "cases": len(cases), "seconds": tier_meta.get("seconds", 0.0)
                          + seconds, "executor": opts.executor, "workers": opts.workers,
                          "inputs": {"registry": opts.registry, "models": opts.models, "limit": opts.limit}})
        _write_json(run_dir / RUN_FILE, meta)
        tier_meta.update(reference_pass(tier, opts, journal, cases, run_dir))
        _write_json(run_dir / RUN_FILE, meta)
        paths = write_tables(run_dir, journal, meta)
        records = [r for r in journal.records(tier.name) if r["case_id"] in wanted]
    finally:
        journal.close()
    summary = summarize(records, tier.name, opts.backend, reference_outcomes(run_dir, tier.name))
    summary.update({"run_id": meta["run_id"], "run_dir": str(run_dir), "backend": opts.backend,
                    "shard": meta.get("shard"), "executor": opts.executor, "workers": opts.workers,
                    "resumed": len(cases) - len(todo), "ran": len(todo), "seconds": round(seconds, 3),
                    "list_seconds": round(list_seconds, 3),
                    "results": str(paths["results"])})
    return summary
