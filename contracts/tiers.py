"""The tier protocol: what the run engine knows of a tier, and how it finds one.

Why: the runner, the worker processes and the executors know nothing about models or op
registries; they schedule `Case`s of a tier and get back a `CaseOutcome`. A tier lists its cases
and executes one; everything else is optional and declared (see `Tier`).

Tiers are found by name through the entry-point group ``harness.tiers`` (the built-in `unit`,
`representative`, `full` and `upstream` are registered there by this project's `pyproject.toml`;
a package adds its own the same way), or by ``MODULE:ATTR`` naming a tier object or a class
instantiated without arguments (how tests plug in a tier of trivial cases):

    tier = load_tier("unit")                    # or "mypkg.tiers:SmokeTier"
    cases = tier.cases(TierInputs(backend="neuron"))
    outcome = from_result(cases[0], tier.execute(cases[0], "neuron"), tier.stages)
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from contracts.plugins import entry_points
from contracts.records import Case, CaseOutcome, ModelCheck, StageResult
from contracts.status import Status, stage_order

ENTRY_POINT_GROUP = "harness.tiers"


@dataclass
class TierInputs:
    """What a tier may need to list its cases (each tier reads the fields it understands)."""

    backend: str = "neuron"
    registry: str | None = None  # unit tier: a registry Parquet path (None: the bundled default)
    models: str | None = None  # representative: a selection dir; full: a crawl store dir or snapshot file
    options: dict[str, Any] = field(default_factory=dict)


#: What `Tier.execute` may return; `from_result` turns each into a CaseOutcome.
TierResult = ModelCheck | StageResult | list[StageResult] | CaseOutcome | dict[str, Any]


@runtime_checkable
class Tier(Protocol):
    """A tier plug-in. Required: `name`, `stages`, `cases`, `execute`. Optional, read only through
    `tier_option` (attributes, with the default the engine uses when a tier does not set them,
    `TIER_DEFAULTS`) and `tier_hook` (methods, None when a tier does not have them, `TIER_HOOKS`):

        chunk_size = 1               cases sent to a worker at once (needs `execute_many` above 1)
        timeout = None               seconds per case, and per chunk (None: the settings' default)
        max_cases_per_worker = None  recycle a worker process after this many cases
        reference_rerun = True       on a device backend, re-run dead or unjudged failing cases on
                                     the reference backend to blame them
        localizes = False            a failing case localizes its failure before it returns
                                     (harness.rootcause): its limit leaves HARNESS_ROOT_CAUSE_SECONDS
        execute_many(cases, backend) -> list[TierResult]   a chunk at once
        setup(backend) -> None       once per worker process, before its first case
        summarize(records) -> dict   figures of the tier's own for run.json
    """

    name: str  # "unit", "representative", "full", "upstream", or your own
    stages: tuple[str, ...]  # the stages each case reports (rows per case)

    def cases(self, inputs: TierInputs) -> list[Case]:
        """The tier's cases in priority order (a --limit keeps the head)."""
        ...

    def execute(self, case: Case, backend: str) -> TierResult: ...


#: The optional attributes of a tier and their defaults.
TIER_DEFAULTS: dict[str, Any] = {
    "chunk_size": 1,
    "timeout": None,
    "max_cases_per_worker": None,
    "reference_rerun": True,
    "localizes": False,
}


#: The optional methods of a tier (`tier_hook`).
TIER_HOOKS: tuple[str, ...] = ("execute_many", "setup", "summarize")


def tier_option(tier: Tier, name: str) -> Any:
    """An optional attribute of a tier, or its declared default (one place that reads them; a name
    not in `TIER_DEFAULTS` is a KeyError, so a misspelt option cannot silently read a default)."""
    return getattr(tier, name, TIER_DEFAULTS[name])


def tier_hook(tier: Tier, name: str) -> Callable[..., Any] | None:
    """An optional method of a tier (`TIER_HOOKS`), or None when the tier does not implement it
    (one place that probes for them; an undeclared name is a KeyError)."""
    if name not in TIER_HOOKS:
        raise KeyError(f"{name!r} is not an optional tier method: one of {', '.join(TIER_HOOKS)}")
    hook = getattr(tier, name, None)
    return hook if callable(hook) else None


def tier_chunk_size(tier: Tier) -> int:
    """Cases per chunk: the tier's `chunk_size` when it can execute a chunk at once, else 1."""
    if tier_hook(tier, "execute_many") is None:
        return 1
    return max(1, int(tier_option(tier, "chunk_size") or 1))


def tier_names() -> list[str]:
    """The names `load_tier` resolves without MODULE:ATTR (the entry-point group)."""
    return sorted(entry_points(ENTRY_POINT_GROUP))


@functools.cache
def load_tier(ref: str) -> Tier:
    """Resolve a `--tier` value to a tier object: an entry-point name or MODULE:ATTR. Raises
    ValueError naming the accepted forms."""
    module_name, sep, attr = ref.partition(":")
    if not sep:
        ep = entry_points(ENTRY_POINT_GROUP).get(ref)
        if ep is None:
            raise ValueError(
                f"unknown tier {ref!r}: use {', '.join(tier_names()) or 'a registered tier'} "
                f"or MODULE:ATTR (tiers register in the entry-point group {ENTRY_POINT_GROUP!r})"
            )
        obj = ep.load()
    else:
        if not module_name or not attr:
            raise ValueError(f"tier {ref!r}: expected MODULE:ATTR")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"tier {ref!r} cannot be loaded: {exc}") from exc
    if isinstance(obj, type):
        obj = obj()
    missing = [n for n in ("name", "stages", "cases", "execute") if not hasattr(obj, n)]
    if missing:
        raise ValueError(f"tier {ref!r} has no {', '.join(map(repr, missing))}: not a tier plug-in")
    return obj


# ------------------------------------------------------------------------------------- outcomes


def from_result(case: Case, result: Any, stages: Iterable[str], seconds: float = 0.0) -> CaseOutcome:
    """Normalize what a tier's execute returned (ModelCheck, StageResults, dicts) to a CaseOutcome."""
    base = dict(
        case_id=case.case_id,
        tier=case.tier,
        model_ids=list(case.model_ids),
        weight=float(case.weight),
        seconds=seconds,
    )
    if isinstance(result, CaseOutcome):
        return result
    if isinstance(result, dict) and "stages" in result and "case_id" in result:
        return CaseOutcome.from_dict({**base, **result})
    if isinstance(result, ModelCheck):
        ordered = sorted(result.stages.values(), key=lambda r: stage_order(r.stage))
        info = {
            "model_id": result.model_id,
            "model_type": result.model_type,
            "architecture": result.architecture,
            "parameters": result.parameters,
            "graphs": result.graphs,
            "recompiles": result.recompiles,
            "backend": result.backend,
        }
        return CaseOutcome(
            **base,
            stages=[r.to_dict() for r in ordered],
            fallback_count=result.fallback_count,
            fallback_ops=list(result.fallback_ops or []),
            fallback_events=list(result.fallback_events),
            peak_memory_bytes=result.peak_memory_bytes,
            info=info,
        )
    if isinstance(result, StageResult):
        result = [result]
    if isinstance(result, (list, tuple)):
        out = []
        for r in result:
            out.append(r.to_dict() if isinstance(r, StageResult) else StageResult(**r).to_dict())
        return CaseOutcome(**base, stages=out)
    raise TypeError(
        f"tier returned {type(result).__name__} for case {case.case_id!r}; expected ModelCheck, "
        "StageResult list or CaseOutcome"
    )


def failure_outcome(
    case: Case,
    stages: Iterable[str],
    status: Status | str,
    reason: str,
    error_class: str = "",
    message: str = "",
    seconds: float = 0.0,
) -> CaseOutcome:
    """A case that did not report (hang, crash, OOM, exception): every stage gets `status`.

    Which stage was running when the worker died is not known, so no stage is claimed to pass.
    The case's labels (``payload["info"]``: model type, upstream op and dtype...) stay on the rows.
    """
    status = Status(status).value
    rows = [
        StageResult(
            stage=s, status=status, reason=reason, error_class=error_class, message=message, seconds=seconds
        ).to_dict()
        for s in (list(stages) or ["case"])
    ]
    return CaseOutcome(
        case_id=case.case_id,
        tier=case.tier,
        stages=rows,
        model_ids=list(case.model_ids),
        weight=float(case.weight),
        seconds=seconds,
        info=dict(case.payload.get("info") or {}),
    )
