"""What the model tiers share: a case's ModelSpec checked stage by stage, blamed and (where the
backend is to blame) localized to the call that broke it in the worker, and the worker's start-up
that imports the model stack once."""

from __future__ import annotations

import importlib

from contracts.backends import get_backend
from contracts.records import Case, CaseOutcome, StageResult
from contracts.status import Status
from contracts.tiers import from_result
from harness.tiers.quick_subset import traits_of


def run_model_check(case: Case, backend: str, stages: tuple[str, ...]) -> CaseOutcome:
    """Check the case's ModelSpec with harness.stages.check.check_model, blamed and localized
    (harness.rootcause.localize); a not-runnable case reports why."""
    if case.payload.get("not_attempted"):
        reason = str(case.payload["not_attempted"])
        rows = [StageResult(s, Status.NOT_ATTEMPTED, reason=reason) for s in stages]
        out = from_result(case, rows, stages)
    else:
        from harness.rootcause.localize import check_with_root_cause

        spec = case.spec()
        out = from_result(case, check_with_root_cause(spec, backend, list(stages)), stages)
        out.info.setdefault("traits", traits_of(spec))  # harness.tiers.quick_subset.traits_of
    out.info.update(case.payload.get("info") or {})
    return out


#: transformers modules every model case imports when it builds its first model (modeling and
#: loss utilities with scipy, the models' lazy import structure: ~5 s at load 15): imported in the
#: worker's start-up, which overlaps the listing, not in the first case's load stage
MODEL_PRELOAD = (
    "transformers.modeling_utils",
    "transformers.modeling_layers",
    "transformers.loss.loss_utils",
    "transformers.models",
)


def load_model_stack(backend: str) -> None:
    import harness.stages.check  # noqa: F401  (torch + transformers once per worker, not per case)

    get_backend(backend)
    for name in MODEL_PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the case that needs it reports the failure, as without the preload
            pass
