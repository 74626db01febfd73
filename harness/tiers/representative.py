"""The representative tier: the selected representative models (agents.select), every stage."""

from __future__ import annotations

from contracts.records import Case, CaseOutcome
from contracts.settings import TIER_LIMITS
from contracts.status import MODEL_STAGES
from contracts.tiers import TierInputs
from harness.tiers.model_check import load_model_stack, run_model_check


class RepresentativeTier:
    """The selected representative models (agents.select), every stage."""

    name = "representative"
    stages = MODEL_STAGES
    chunk_size = 1
    timeout = TIER_LIMITS["representative"].timeout
    localizes = True  # a backend-blamed row is localized in the worker (harness.rootcause)

    def setup(self, backend: str) -> None:
        load_model_stack(backend)
        if "compile" in self.stages:  # torch.compile's imports in the start-up, not the first compile stage
            from harness.stages.compile import warm_up

            warm_up()

    def cases(self, inputs: TierInputs) -> list[Case]:
        from agents import select

        specs = (
            select.load_representatives(inputs.models) if inputs.models else select.default_representatives()
        )
        if inputs.options.get(
            "limit"
        ):  # a limited run keeps the models that cover the most (harness.tiers.quick_subset)
            from harness.tiers.quick_subset import coverage_order

            specs = coverage_order(specs, inputs.registry)
        return [Case.for_spec(s, self.name) for s in specs]

    def execute(self, case: Case, backend: str) -> CaseOutcome:
        return run_model_check(case, backend, self.stages)
