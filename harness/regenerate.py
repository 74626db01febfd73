"""Rebuild the registry from a model set: record every model in worker processes, merge, diff.

    summary = regenerate(specs, out="registry.parquet", workers=2)
    summary["diff"]  # ops and signatures added or removed against the previous file at `out`

Workers are spawned processes (torch and transformers load once per worker), one model per task,
each bounded by a timeout; a model that fails or times out is listed with its reason, never lost.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from contracts.records import ModelSpec
from harness.workloads import SEQ_LENGTHS, SpecResult, record_spec
from registry.store import Registry


def _task(args: tuple) -> SpecResult:
    spec_dict, seqs, timeout = args
    try:
        return record_spec(spec_dict, seqs, timeout=timeout)
    except BaseException as exc:  # noqa: BLE001 - the worker must hand back a row
        return SpecResult(spec_dict.get("model_id", ""), error=f"{type(exc).__name__}: {exc}"[:300])


def _init_worker() -> None:
    import signal
    import warnings

    try:  # die with the parent (Linux): a killed regenerate leaves no orphan recorders
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


CHECKPOINT_EVERY = 25  # models


def checkpoint_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def record_all(specs: Sequence[ModelSpec], workers: int = 1, seq_lengths: tuple[int, ...] = SEQ_LENGTHS,
               timeout: float = 300.0, progress: bool = True, checkpoint: Path | None = None
               ) -> tuple[Registry, list[SpecResult]]:
    """Record every spec; with `checkpoint`, the registry so far is saved there every
    CHECKPOINT_EVERY models, so a long run that is stopped still leaves a usable registry."""
    from tqdm import tqdm

    tasks = [(asdict(s), tuple(seq_lengths), timeout) for s in specs]
    registry, results = Registry(), []
    bar = tqdm(total=len(tasks), desc="recording", unit="model", file=sys.stderr, disable=not progress)

    def collect(res: SpecResult) -> None:
        for entry in res.entries:
            registry.add(entry)
        res.entries = []
        results.append(res)
        bar.update(1)
        bar.set_postfix(signatures=len(registry))
        if checkpoint is not None and len(results) % CHECKPOINT_EVERY == 0:
            registry.save(checkpoint)

    try:
        if workers <= 1:
            for task in tasks:
                collect(_task(task))
        else:
            # ProcessPoolExecutor survives a worker that dies (BrokenProcessPool: the models not
            # finished are reported); multiprocessing.Pool can hang in join() after that.
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, max_tasks_per_child=25) as pool:
                futures = {pool.submit(_task, t): t[0]["model_id"] for t in tasks}
                for fut in as_completed(futures):
                    try:
                        collect(fut.result())
                    except Exception as exc:  # noqa: BLE001 - a dead worker: the model is reported
                        collect(SpecResult(futures[fut], error=f"worker died: {type(exc).__name__}: {exc}"[:300]))
    finally:
        bar.close()
    results.sort(key=lambda r: r.model_id)
    return registry, results


def regenerate(specs: Sequence[ModelSpec], out: str | os.PathLike, *, workers: int = 1, source: str = "",
               seq_lengths: tuple[int, ...] = SEQ_LENGTHS, timeout: float = 300.0, progress: bool = True) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = Path(out)
    old = Registry.load(out) if out.is_file() else Registry()
    partial = checkpoint_path(out)
    registry, results = record_all(specs, workers, seq_lengths, timeout, progress, checkpoint=partial)
    registry.save(out)
    partial.unlink(missing_ok=True)
    modes: dict[str, int] = {}
    for r in results:
        for run in r.runs:
            modes[run["mode"]] = modes.get(run["mode"], 0) + 1
    failed = [{"model_id": r.model_id, "reason": r.error or next((x["error"] for x in r.runs if x["error"]), "")}
              for r in results if r.error or any(x["mode"] == "failed" for x in r.runs)]
    return {
        "out": str(out),
        "source": source,
        "models": len(specs),
        "seq_lengths": list(seq_lengths),
        "recorded_models": sum(1 for r in results if any(x["mode"] != "failed" for x in r.runs)),
        "runs_by_mode": modes,
        "failed": failed,
        "signatures": len(registry),
        "ops": len(registry.ops()),
        "calls": sum(x["calls"] for r in results for x in r.runs),
        "diff": registry.diff(old).to_dict(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
