"""Executors: where a tier's chunks of cases run. `local` (a pool of isolated worker processes on
this machine, the default) or `ray` (the same workers inside Ray actors on a cluster).

Both implement harness.engine.executors.base.Executor: they take the same arguments and call
`on_results(list[CaseOutcome])` as chunks finish (local: as each outcome is known, so a
chunk re-run case by case after a death lands case by case), from one thread at a time, so the
runner journals results identically whichever runs them.
"""

from __future__ import annotations

import os

from harness.engine.executors.base import Executor
from harness.engine.workers import WorkerLimits

EXECUTORS = ("local", "ray")


def make_executor(
    kind: str,
    tier_ref: str,
    backend: str,
    workers: int,
    limits: WorkerLimits,
    log_dir: str | os.PathLike | None = None,
    ray_address: str | None = None,
    sys_path: list[str] | None = None,
) -> Executor:
    if kind == "local":
        from harness.engine.executors.local import LocalExecutor

        return LocalExecutor(tier_ref, backend, workers, limits, log_dir=log_dir, sys_path=sys_path)
    if kind == "ray":
        from harness.engine.executors.ray import RayExecutor

        return RayExecutor(tier_ref, backend, workers, limits, address=ray_address, sys_path=sys_path)
    raise ValueError(f"unknown executor {kind!r}: use one of {', '.join(EXECUTORS)}")
