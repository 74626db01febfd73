"""Tier plug-ins: how each tier lists its Cases and executes one, behind one small interface.

Why: the runner, the worker processes and the executors know nothing about models or op
registries; they schedule `Case`s of a tier and get back a `CaseOutcome`. A tier is any object with

    name: str                      # "unit", "representative", "full", "upstream", or your own
    stages: tuple[str, ...]        # the stages each case reports (rows per case)
    chunk_size: int                # cases sent to a worker at once (1 for models)
    timeout: float                 # optional: default seconds per case (and per chunk)
    max_cases_per_worker: int      # optional: recycle a worker process after this many cases
    cases(inputs: TierInputs) -> list[Case]            # in priority order (a --limit keeps the head)
    execute(case: Case, backend: str) -> ModelCheck | list[StageResult] | CaseOutcome
    execute_many(cases, backend) -> list[...]           # optional, for chunks
    setup(backend: str) -> None                          # optional, once per worker process
    reference_rerun: bool                                # optional (default True): on a device backend, re-run
                                                         # dead / unjudged failing cases on cpu to blame them

`--tier` takes a built-in name (`unit`, `representative`, `full`) or `MODULE:ATTR` naming such an
object (or a class, instantiated without arguments): that is how tests plug in a tier of trivial
cases and how a user adds one without touching the harness.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Any, Iterable

from contracts.backends import get_backend
from contracts.records import Case, CaseOutcome, ModelCheck, ModelSpec, StageResult
from contracts.settings import TIER_LIMITS
from contracts.status import FULL_STAGES, MODEL_STAGES, Status, UNIT_STAGES, UPSTREAM_STAGES, stage_order
from harness.quick_subset import traits_of  # noqa: F401  (labels every model case's rows)

BUILTIN_TIERS = ("unit", "representative", "full", "upstream")


@dataclass
class TierInputs:
    """What a tier may need to list its cases (each tier reads the fields it understands)."""

    backend: str = "neuron"
    registry: str | None = None  # unit tier: a registry Parquet path (None: the bundled default)
    models: str | None = None  # representative: a selection dir; full: a crawl store dir or snapshot file
    options: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------- loading

@functools.lru_cache(maxsize=None)
def load_tier(ref: str) -> Any:
    """Resolve a `--tier` value to a tier object (see the module docstring)."""
    if ref in BUILTIN_TIERS:
        return {"unit": UnitTier, "representative": RepresentativeTier, "full": FullTier,
                "upstream": UpstreamTier}[ref]()
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"unknown tier {ref!r}: use {', '.join(BUILTIN_TIERS)} or MODULE:ATTR")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"tier {ref!r} cannot be loaded: {exc}") from exc
    if isinstance(obj, type):
        obj = obj()
    for needed in ("name", "stages", "cases", "execute"):
        if not hasattr(obj, needed):
            raise ValueError(f"tier {ref!r} has no {needed!r}: not a tier plug-in")
    return obj


def tier_chunk_size(tier: Any) -> int:
    return max(1, int(getattr(tier, "chunk_size", 1) or 1)) if hasattr(tier, "execute_many") else 1


def chunk_cases(cases: list[Case], size: int) -> list[list[Case]]:
    """`cases` in execution order, cut into chunks that ramp up: 1, 2, 4, ... cases, then `size`.

    Why: a chunk's outcomes land together, so with full chunks the first result (and a fail-fast
    stop) waits for a whole chunk even when the likely failure runs first; the ramp lands the first
    case alone, and costs only log2(size) extra round trips. The cases and their order are unchanged."""
    chunks, i, n = [], 0, 1
    while i < len(cases):
        step = min(n, max(1, size))
        chunks.append(cases[i: i + step])
        i, n = i + step, n * 2
    return chunks


# ------------------------------------------------------------------------------------- outcomes

def from_result(case: Case, result: Any, stages: Iterable[str], seconds: float = 0.0) -> CaseOutcome:
    """Normalize what a tier's execute returned (ModelCheck, StageResults, dicts) to a CaseOutcome."""
    base = dict(case_id=case.case_id, tier=case.tier, model_ids=list(case.model_ids), weight=float(case.weight),
                seconds=seconds)
    if isinstance(result, CaseOutcome):
        return result
    if isinstance(result, dict) and "stages" in result and "case_id" in result:
        return CaseOutcome.from_dict({**base, **result})
    if isinstance(result, ModelCheck):
        ordered = sorted(result.stages.values(), key=lambda r: stage_order(r.stage))
        info = {"model_id": result.model_id, "model_type": result.model_type,
                "architecture": result.architecture, "parameters": result.parameters,
                "graphs": result.graphs, "recompiles": result.recompiles, "backend": result.backend}
        return CaseOutcome(**base, stages=[r.to_dict() for r in ordered], fallback_count=result.fallback_count,
                           fallback_ops=list(result.fallback_ops), fallback_events=list(result.fallback_events),
                           peak_memory_bytes=result.peak_memory_bytes, info=info)
    if isinstance(result, StageResult):
        result = [result]
    if isinstance(result, (list, tuple)):
        out = []
        for r in result:
            out.append(r.to_dict() if isinstance(r, StageResult) else StageResult(**r).to_dict())
        return CaseOutcome(**base, stages=out)
    raise TypeError(f"tier returned {type(result).__name__} for case {case.case_id!r}; expected ModelCheck, "
                    "StageResult list or CaseOutcome")


def failure_outcome(case: Case, stages: Iterable[str], status: Status | str, reason: str,
                    error_class: str = "", message: str = "", seconds: float = 0.0) -> CaseOutcome:
    """A case that did not report (hang, crash, OOM, exception): every stage gets `status`.

    Which stage was running when the worker died is not known, so no stage is claimed to pass.
    The case's labels (``payload["info"]``: model type, upstream op and dtype...) stay on the rows.
    """
    status = Status(status).value
    rows = [StageResult(stage=s, status=status, reason=reason, error_class=error_class, message=message,
                        seconds=seconds).to_dict() for s in (list(stages) or ["case"])]
    return CaseOutcome(case_id=case.case_id, tier=case.tier, stages=rows, model_ids=list(case.model_ids),
                       weight=float(case.weight), seconds=seconds, info=dict(case.payload.get("info") or {}))


# ------------------------------------------------------------------------------ built-in tiers

def run_model_check(case: Case, backend: str, stages: tuple[str, ...]) -> CaseOutcome:
    """Check the case's ModelSpec with harness.check.check_model; a not-runnable case reports why."""
    if case.payload.get("not_attempted"):
        reason = str(case.payload["not_attempted"])
        rows = [StageResult(s, Status.NOT_ATTEMPTED, reason=reason) for s in stages]
        out = from_result(case, rows, stages)
    else:
        from harness.blame_probe import check_with_blame

        spec = case.spec()
        out = from_result(case, check_with_blame(spec, backend, stages), stages)
        out.info.setdefault("traits", traits_of(spec))  # harness.quick_subset.traits_of
    out.info.update(case.payload.get("info") or {})
    return out


class UnitTier:
    """Registry op cases (registry.unit_tier, the shape registry's generated tests)."""

    name = "unit"
    stages = UNIT_STAGES
    chunk_size = 64
    timeout = TIER_LIMITS["unit"].timeout  # per case, and per chunk of 64 (an op takes milliseconds)
    max_cases_per_worker = TIER_LIMITS["unit"].max_cases_per_worker  # a restart costs a torch import

    def setup(self, backend: str) -> None:
        get_backend(backend)
        from registry import unit_tier  # noqa: F401  (start-up, beside the listing: not the first case's time)

    def cases(self, inputs: TierInputs) -> list[Case]:
        from registry import unit_tier

        return list(unit_tier.cases(inputs.registry))  # None: $HARNESS_REGISTRY, else the bundled one

    def execute(self, case: Case, backend: str) -> Any:
        from registry import unit_tier

        return unit_tier.execute(case.payload, backend)

    def execute_many(self, cases: list[Case], backend: str) -> list[Any]:
        from registry import unit_tier

        return list(unit_tier.execute_many([c.payload for c in cases], backend))

    def summarize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        from registry import unit_tier

        return {"scaling": unit_tier.scaling_report([CaseOutcome.from_dict(r["outcome"]).stages for r in records])}


#: transformers modules every model case imports when it builds its first model (modeling and
#: loss utilities with scipy, the models' lazy import structure: ~5 s at load 15): imported in the
#: worker's start-up, which overlaps the listing, not in the first case's load stage
MODEL_PRELOAD = ("transformers.modeling_utils", "transformers.modeling_layers", "transformers.loss.loss_utils",
                 "transformers.models")


def _load_model_stack(backend: str) -> None:
    import harness.check  # noqa: F401  (torch + transformers once per worker, not per case)

    get_backend(backend)
    for name in MODEL_PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the case that needs it reports the failure, as without the preload
            pass


class RepresentativeTier:
    """The selected representative models (agents.select), every stage."""

    name = "representative"
    stages = MODEL_STAGES
    chunk_size = 1
    timeout = TIER_LIMITS["representative"].timeout

    def setup(self, backend: str) -> None:
        _load_model_stack(backend)
        if "compile" in self.stages:  # torch.compile's imports in the start-up, not the first compile stage
            from harness.compile_stage import warm_up

            warm_up()

    def cases(self, inputs: TierInputs) -> list[Case]:
        from agents import select

        specs = select.load_representatives(inputs.models) if inputs.models else select.default_representatives()
        if inputs.options.get("limit"):  # a limited run keeps the models that cover the most (harness.quick_subset)
            from harness.quick_subset import coverage_order

            specs = coverage_order(specs, inputs.registry)
        return [Case.for_spec(s, self.name) for s in specs]

    def execute(self, case: Case, backend: str) -> CaseOutcome:
        return run_model_check(case, backend, self.stages)


class FullTier:
    """The whole population (catalog, crawl store or snapshot): load, forward, backward, deduplicated."""

    name = "full"
    stages = FULL_STAGES
    chunk_size = 1
    timeout = TIER_LIMITS["full"].timeout

    def setup(self, backend: str) -> None:
        _load_model_stack(backend)

    def cases(self, inputs: TierInputs) -> list[Case]:
        from harness.population import dedupe_cases, load_population, sample_members

        workers = int(inputs.options.get("workers", 1))
        members = load_population(inputs.models)
        if inputs.options.get("limit"):
            members = sample_members(members, int(inputs.options["limit"]), workers, registry=inputs.registry)
        return dedupe_cases(members, self.name, workers=workers)

    def execute(self, case: Case, backend: str) -> CaseOutcome:
        return run_model_check(case, backend, self.stages)



class UpstreamTier:
    """PyTorch's op_db OpInfo samples, every CPU dtype, forward and backward (registry.upstream).

    Options (``--ops``, ``--dtypes``): comma-separated OpInfo name globs and dtype names."""

    name = "upstream"
    stages = UPSTREAM_STAGES
    chunk_size = 32
    timeout = TIER_LIMITS["upstream"].timeout  # per case, and per chunk of 32 (a sample takes milliseconds)
    max_cases_per_worker = TIER_LIMITS["upstream"].max_cases_per_worker  # a restart imports torch and op_db

    def setup(self, backend: str) -> None:
        from registry.upstream import worker

        worker.context(backend)

    def cases(self, inputs: TierInputs) -> list[Case]:
        from registry.upstream import listing

        opts = inputs.options
        dtypes = opts.get("dtypes")
        if isinstance(dtypes, str):
            dtypes = [d for d in dtypes.split(",") if d.strip()]
        groups = listing.list_groups(opts.get("ops"), dtypes, workers=int(opts.get("workers", 1) or 1),
                                     progress=bool(opts.get("progress", True)))
        return listing.to_cases(groups)

    def execute(self, case: Case, backend: str) -> Any:
        return self.execute_many([case], backend)[0]

    def execute_many(self, cases: list[Case], backend: str) -> list[Any]:
        from registry.upstream import worker

        return worker.execute_many([(c.case_id, c.payload) for c in cases], backend)
