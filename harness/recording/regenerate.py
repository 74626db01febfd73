"""Rebuild the registry from a model set: each model is a case of the `record` tier, run by the
tier runner in its isolated, resumable worker pool (`--workers`, `--executor ray`), on the device
under test; then the per-model registries are merged and diffed against the previous file.

    summary = regenerate(specs, out="registry.parquet", workers=2, backend="neuron")
    summary["diff"]  # ops and signatures added or removed against the previous file at `out`

Why the runner: a model that hangs, crashes or eats memory is a recorded outcome with its reason
(the worker is killed and replaced), and a regenerate that is stopped continues where it was when
run again. The work directory `OUT.run/` is a run directory of `harness.engine.runner` (run.json,
journal.jsonl, workers/ logs, results.parquet with one `record` row per model) plus
`entries/<model>.parquet`, the registry of each recorded model; it is removed once the merged
registry is saved (`keep_run=True` keeps it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from contracts.records import Case, CaseOutcome, ModelSpec, StageResult
from contracts.status import Status
from harness.recording.workloads import SEQ_LENGTHS
from registry.store import Registry

TIER_REF = "harness.recording.regenerate:RecordTier"
SPECS_FILE = "specs.json"
ENTRIES_DIR = "entries"
DEFAULT_TIMEOUT = 300.0  # seconds per model
MAX_MODELS_PER_WORKER = 100  # a fresh process now and then: transformers modeling modules and caches pile up


def work_dir(out: Path) -> Path:
    return out.with_name(out.name + ".run")


def _entries_name(model_id: str) -> str:
    return hashlib.sha1(model_id.encode()).hexdigest()[:16] + ".parquet"


class RecordTier:
    """Tier plug-in: record one model's op calls (harness.recording.workloads.record_spec) per case."""

    name = "record"
    stages = ("record",)
    chunk_size = 1
    timeout = DEFAULT_TIMEOUT
    max_cases_per_worker = MAX_MODELS_PER_WORKER
    # No re-run on the reference backend: it would record the model again on the CPU (its
    # decompositions, e.g. aten._scaled_dot_product_flash_attention_for_cpu) and cost a second run
    # of every model that fails; the failure and its reason are reported as recorded.
    reference_rerun = False

    def setup(self, backend: str) -> None:
        import harness.recording.workloads  # the workloads, loaded once per worker, not per model
        from contracts.backends import get_backend

        get_backend(backend)  # the device must load before a model is recorded on it
        import harness.build.models  # noqa: F401  (torch + transformers once per worker, not per model)

    def cases(self, inputs: Any) -> list[Case]:
        data = json.loads(Path(inputs.models).read_text())
        out = []
        for d in data["specs"]:
            case = Case.for_spec(ModelSpec.from_dict(d), self.name)
            case.payload["record"] = {"seqs": data["seqs"], "entries_dir": data["entries_dir"]}
            out.append(case)
        return out

    def execute(self, case: Case, backend: str) -> CaseOutcome:
        from harness.recording.workloads import record_spec

        opts = case.payload["record"]
        res = record_spec(case.payload["spec"], tuple(opts["seqs"]), backend=backend)
        failed = [r for r in res.runs if r["mode"] == "failed"]
        recorded = [r for r in res.runs if r["mode"] != "failed"]
        metrics: dict[str, Any] = {
            "signatures": len(res.entries),
            "calls": sum(r["calls"] for r in res.runs),
            "modes": sorted({r["mode"] for r in res.runs}),
            "device": res.device,
        }
        fake_errors = sorted({r["fake_error"] for r in res.runs if r["fake_error"]})
        if fake_errors:
            metrics["fake_error"] = fake_errors[0][:300]
        info: dict[str, Any] = {
            "model_id": res.model_id,
            "model_type": case.payload["spec"].get("model_type", ""),
            "architecture": case.payload["spec"].get("architecture", ""),
        }
        if res.entries:  # a model that failed part-way keeps the calls it made before the failure
            name = _entries_name(f"{case.case_id}@{backend}")  # a run on another backend never overwrites it
            Registry(res.entries).save(Path(opts["entries_dir"]) / name)
            info["entries"] = name
        if recorded and not failed and res.entries:
            status, reason, message = Status.PASS, "", ""
        else:
            message = (
                res.error or next((r["error"] for r in failed if r["error"]), "") or "no op calls recorded"
            )
            status = Status.ERROR
            reason = (
                "model failed part-way: the calls before the failure are kept"
                if res.entries
                else "model could not be recorded"
            )
        metrics["phases"] = sorted({p for r in recorded for p in r["phases"]})
        row = StageResult(
            "record",
            status,
            reason=reason,
            error_class=message.split(":", 1)[0] if message else "",
            message=message[:300],
            seconds=res.seconds,
            metrics=metrics,
        )
        return CaseOutcome(
            case_id=case.case_id,
            tier=self.name,
            stages=[row.to_dict()],
            model_ids=list(case.model_ids),
            weight=float(case.weight),
            seconds=res.seconds,
            info=info,
        )


def record_all(
    specs: Sequence[ModelSpec],
    run_dir: Path,
    *,
    backend: str = "neuron",
    workers: int = 1,
    seq_lengths: tuple[int, ...] = SEQ_LENGTHS,
    timeout: float = DEFAULT_TIMEOUT,
    executor: str = "local",
    ray_address: str | None = None,
    memory_bytes: int | None = None,
    progress: bool = True,
) -> tuple[Registry, list[dict[str, Any]], dict[str, Any]]:
    """Record every spec as a `record` case in `run_dir` (resumable); returns (merged registry,
    one result dict per model, the runner's summary)."""
    from harness.engine.journal import Journal
    from harness.engine.runner import RunOptions, run_tier
    from harness.engine.workers import WorkerLimits

    run_dir.mkdir(parents=True, exist_ok=True)
    entries_dir = run_dir / ENTRIES_DIR
    entries_dir.mkdir(exist_ok=True)
    specs_file = run_dir / SPECS_FILE
    text = json.dumps(
        {
            "specs": [asdict(s) for s in specs],
            "seqs": list(seq_lengths),
            "entries_dir": str(entries_dir.resolve()),
        },
        sort_keys=True,
        default=str,
    )
    if (
        not specs_file.exists() or specs_file.read_text() != text
    ):  # same content: keep the mtime (case list key)
        specs_file.write_text(text)
    limits = (
        WorkerLimits(timeout=timeout)
        if memory_bytes is None
        else WorkerLimits(timeout=timeout, memory_bytes=memory_bytes)
    )
    summary = run_tier(
        RunOptions(
            tier=TIER_REF,
            out=run_dir,
            backend=backend,
            workers=workers,
            executor=executor,
            ray_address=ray_address,
            models=str(specs_file),
            limits=limits,
            progress=progress,
            meta={"job": "registry regenerate"},
        )
    )
    registry, results = Registry(), []
    wanted = {s.model_id for s in specs}
    with Journal(run_dir) as journal:
        records = [r for r in journal.records(RecordTier.name) if r["case_id"] in wanted]
    for rec in records:
        out = CaseOutcome.from_dict(rec["outcome"])
        stage = out.stages[0] if out.stages else {}
        name = (out.info or {}).get("entries")
        if name:
            try:
                registry.merge(Registry.load(entries_dir / name))
            except (OSError, ValueError) as exc:  # a damaged per-model file: the model is reported
                stage = {
                    **stage,
                    "status": "error",
                    "reason": "entries file unreadable",
                    "message": str(exc)[:300],
                }
        results.append(
            {
                "model_id": out.case_id,
                "status": stage.get("status"),
                "reason": stage.get("reason") or "",
                "message": stage.get("message") or "",
                "seconds": out.seconds,
                **{
                    k: v
                    for k, v in (stage.get("metrics") or {}).items()
                    if k in ("modes", "calls", "fake_error", "device")
                },
            }
        )
    results.sort(key=lambda r: r["model_id"])
    return registry, results, summary


def regenerate(
    specs: Sequence[ModelSpec],
    out: str | os.PathLike,
    *,
    workers: int = 1,
    source: str = "",
    backend: str = "neuron",
    seq_lengths: tuple[int, ...] = SEQ_LENGTHS,
    timeout: float = DEFAULT_TIMEOUT,
    executor: str = "local",
    ray_address: str | None = None,
    memory_bytes: int | None = None,
    progress: bool = True,
    keep_run: bool = False,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = Path(out)
    old = Registry.load(out) if out.is_file() else Registry()
    run_dir = work_dir(out)
    registry, results, run = record_all(
        specs,
        run_dir,
        backend=backend,
        workers=workers,
        seq_lengths=seq_lengths,
        timeout=timeout,
        executor=executor,
        ray_address=ray_address,
        memory_bytes=memory_bytes,
        progress=progress,
    )
    registry.save(out)
    if not keep_run:
        shutil.rmtree(run_dir, ignore_errors=True)
    modes: dict[str, int] = {}
    for r in results:
        for m in r.get("modes") or ["failed"]:
            modes[m] = modes.get(m, 0) + 1
    failed = [
        {
            "model_id": r["model_id"],
            "status": r["status"],
            "reason": r["message"] or r["reason"],
            "partial": r["reason"].startswith("model failed part-way"),
        }
        for r in results
        if r["status"] != "pass"
    ]
    return {
        "out": str(out),
        "source": source,
        "backend": backend,
        "models": len(specs),
        "seq_lengths": list(seq_lengths),
        "recorded_models": sum(1 for r in results if r["status"] == "pass"),
        "partial_models": sum(1 for f in failed if f["partial"]),
        "runs_by_mode": modes,
        "failed": failed,
        "signatures": len(registry),
        "ops": len(registry.ops()),
        "calls": sum(int(r.get("calls") or 0) for r in results),
        "diff": registry.diff(old).to_dict(),
        "resumed": run.get("resumed", 0),
        "workers": workers,
        "executor": executor,
        "run_dir": str(run_dir) if keep_run else None,
        "seconds": round(time.perf_counter() - t0, 1),
    }
