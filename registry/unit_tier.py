"""The unit tier: one case per registry row, run in batches by the harness's runner.

    cases("ops.parquet")                      -> [Case(tier="unit", case_id="aten.mm.default-1f2e...")]
    execute(case.payload, "neuron")           -> [StageResult(stage="op", ...)]
    execute_many([c.payload for c in chunk], "neuron")

`execute_many` is the fast path: one process replays a whole chunk with the backend adapter,
precision mode and one intra-op thread set up once (spawning a process per op would cost more
than the op). Neither function raises for an op problem; each payload gets exactly one result.
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import torch

from contracts.backends import Backend, get_backend
from contracts.records import Case, StageResult
from contracts.settings import current
from contracts.status import Status
from registry.replay import CaseSpec, replay
from registry.store import Registry


def bundled_registry_path() -> Path:
    """The registry shipped with the package (`harness registry regenerate` rewrites it)."""
    return Path(str(resources.files("registry").joinpath("data/registry.parquet")))


def default_registry_path() -> Path:
    """$HARNESS_REGISTRY, else the registry bundled with the package (rewritten by regenerate)."""
    return current().registry or bundled_registry_path()


def cases(registry_path: str | None = None) -> list[Case]:
    """Every registry row as a unit-tier Case (payload: op, signature, constraints, case_id).

    None: $HARNESS_REGISTRY, else the bundled registry. Order: heaviest download weight first."""
    out = []
    for entry in Registry.load(registry_path or default_registry_path()):
        spec = CaseSpec.from_entry(entry)
        out.append(Case(case_id=entry.case_id, tier="unit", payload=spec.to_payload(),
                        model_ids=entry.models, weight=entry.weight))
    out.sort(key=lambda c: -c.weight)  # stable: equal weights keep registry order
    return out


def _one_thread() -> None:
    """One intra-op thread in a process that replays cases: the runner's workers share the cores,
    and tiny ops gain nothing from threads. Set once and left so (switching the thread count back
    and forth rebuilds the thread pool, which cost more than the ops)."""
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _run(payload: dict[str, Any], adapter: Backend, mode: str) -> StageResult:
    t0 = time.perf_counter()
    try:
        return replay(CaseSpec.from_payload(payload), adapter, mode)
    except Exception as exc:  # noqa: BLE001 - last line of defence: one result per payload
        return StageResult(stage="op", status=Status.ERROR, reason="harness error while replaying",
                           error_class=type(exc).__name__, message=str(exc).splitlines()[0][:300] if str(exc) else "",
                           failing_op=str(payload.get("op", "")), seconds=time.perf_counter() - t0,
                           metrics={"native": None, "fallback_ops": [], "max_abs_err": None})


def execute(payload: dict[str, Any], backend: str) -> list[StageResult]:
    return execute_many([payload], backend)[0]


def execute_many(payloads: Iterable[dict[str, Any]], backend: str) -> list[list[StageResult]]:
    payloads = list(payloads)
    try:
        adapter = get_backend(backend)
    except Exception as exc:  # noqa: BLE001 - a backend that cannot load: every case says so
        msg = str(exc).splitlines()[0][:300] if str(exc) else ""
        return [[StageResult(stage="op", status=Status.NOT_ATTEMPTED, reason=f"backend {backend!r} failed to load",
                             error_class=type(exc).__name__, message=msg, failing_op=str(p.get("op", "")))]
                for p in payloads]
    mode = adapter.precision_mode()
    _one_thread()
    return [[_run(p, adapter, mode)] for p in payloads]
