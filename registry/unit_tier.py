"""The unit tier: one case per registry row, run in batches by the harness's runner.

    cases("ops.parquet")                      -> [Case(tier="unit", case_id="aten.mm.default-1f2e...")]
    execute(case.payload, "neuron")           -> [StageResult(stage="op", ...)]
    execute_many([c.payload for c in chunk], "neuron")

`execute_many` is the fast path: one process replays a whole chunk with the backend adapter,
precision mode and one intra-op thread set up once (spawning a process per op would cost more
than the op). Neither function raises for an op problem; each payload gets exactly one result.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

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

    None: $HARNESS_REGISTRY, else the bundled registry. Order: the repros of root causes first
    (`harness registry add-repros`: each stands for a bug a model night found, and any head of the
    list keeps them), then coverage first (`coverage_order`), so any head of the list (`--limit
    N`, the quick nightly) covers every (op, dtype) of the registry before it repeats one."""
    out, repros = [], []
    for entry in Registry.load(registry_path or default_registry_path()):
        spec = CaseSpec.from_entry(entry)
        case = Case(
            case_id=entry.case_id,
            tier="unit",
            payload=spec.to_payload(),
            model_ids=entry.models,
            weight=entry.weight,
        )
        (repros if entry.repro else out).append(case)
    return sorted(repros, key=lambda c: c.case_id) + coverage_order(out)


def op_dtype(case: Case) -> tuple[str, str]:
    """(op, dtype) of a case: the distinct dtypes of its tensor arguments, sorted ("f16+f32")."""
    dtypes = sorted(set(re.findall(r'"dt":\s*"(\w+)"', case.payload.get("signature", ""))))
    return str(case.payload.get("op", "")), "+".join(dtypes) or "-"


def coverage_order(items: list[Case]) -> list[Case]:
    """Round robin over (op, dtype) groups: round k takes the k-th heaviest case of every group.

    Groups go in the order of their heaviest case (download weight, then op, dtype); within a
    group heavier cases first, ties by case id. Deterministic and blind to results, so a quick
    subset is the same sample every night."""
    groups: dict[tuple[str, str], list[Case]] = {}
    for c in items:
        groups.setdefault(op_dtype(c), []).append(c)
    for members in groups.values():
        members.sort(key=lambda c: (-c.weight, c.case_id))
    order = sorted(groups, key=lambda k: (-groups[k][0].weight, k))
    out: list[Case] = []
    for k in range(max((len(g) for g in groups.values()), default=0)):
        out.extend(groups[key][k] for key in order if k < len(groups[key]))
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
        return StageResult(
            stage="op",
            status=Status.ERROR,
            reason="harness error while replaying",
            error_class=type(exc).__name__,
            message=str(exc).splitlines()[0][:300] if str(exc) else "",
            failing_op=str(payload.get("op", "")),
            seconds=time.perf_counter() - t0,
            metrics={"native": None, "fallback_ops": [], "max_abs_err": None},
        )


def execute(payload: dict[str, Any], backend: str) -> list[StageResult]:
    return execute_many([payload], backend)[0]


def execute_many(payloads: Iterable[dict[str, Any]], backend: str) -> list[list[StageResult]]:
    payloads = list(payloads)
    try:
        adapter = get_backend(backend)
    except Exception as exc:  # noqa: BLE001 - a backend that cannot load: every case says so
        msg = str(exc).splitlines()[0][:300] if str(exc) else ""
        return [
            [
                StageResult(
                    stage="op",
                    status=Status.NOT_ATTEMPTED,
                    reason=f"backend {backend!r} failed to load",
                    error_class=type(exc).__name__,
                    message=msg,
                    failing_op=str(p.get("op", "")),
                )
            ]
            for p in payloads
        ]
    mode = adapter.precision_mode()
    _one_thread()
    return [[_run(p, adapter, mode)] for p in payloads]


def scaling_report(stage_lists: Iterable[list[dict[str, Any]]]) -> dict[str, Any]:
    """Cases replayed scaled down (by factor) and cases skipped as unreplayable (by reason), with
    the shape budget: the run-time side of `harness registry import`'s count."""
    from registry import scaling

    scaled: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for stages in stage_lists:
        for st in stages:
            factor = (st.get("metrics") or {}).get("scaled_by")
            if factor:
                scaled[str(factor)] = scaled.get(str(factor), 0) + 1
            reason = st.get("reason") or ""
            if st.get("status") == Status.SKIPPED.value and reason.startswith("unreplayable"):
                key = reason.split(" (", 1)[0][:120]
                reasons[key] = reasons.get(key, 0) + 1
    return {
        "shape_budget": scaling.budget(),
        "scaled": sum(scaled.values()),
        "scaled_by_factor": dict(sorted(scaled.items(), key=lambda kv: int(kv[0]))),
        "unreplayable": sum(reasons.values()),
        "unreplayable_reasons": reasons,
    }
