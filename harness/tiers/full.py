"""The full tier: the whole population (catalog, crawl store or snapshot), one case per distinct
architecture: load, forward, backward."""

from __future__ import annotations

from contracts.records import Case, CaseOutcome
from contracts.settings import TIER_LIMITS
from contracts.status import FULL_STAGES
from contracts.tiers import TierInputs
from harness.tiers.model_check import load_model_stack, run_model_check


class FullTier:
    """The whole population (catalog, crawl store or snapshot): load, forward, backward, deduplicated."""

    name = "full"
    stages = FULL_STAGES
    chunk_size = 1
    timeout = TIER_LIMITS["full"].timeout
    localizes = True  # a backend-blamed row is localized in the worker (harness.rootcause)

    def setup(self, backend: str) -> None:
        load_model_stack(backend)

    def cases(self, inputs: TierInputs) -> list[Case]:
        from harness.tiers.population import dedupe_cases, load_population, sample_members

        workers = int(inputs.options.get("workers", 1))
        members = load_population(inputs.models)
        if inputs.options.get("limit"):
            members = sample_members(members, int(inputs.options["limit"]), workers, registry=inputs.registry)
        return dedupe_cases(members, self.name, workers=workers)

    def execute(self, case: Case, backend: str) -> CaseOutcome:
        return run_model_check(case, backend, self.stages)
