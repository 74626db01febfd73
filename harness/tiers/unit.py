"""The unit tier: the shape registry's op cases (registry.unit_tier), in chunks of 64."""

from __future__ import annotations

from typing import Any

from contracts.backends import get_backend
from contracts.records import Case, CaseOutcome
from contracts.settings import TIER_LIMITS
from contracts.status import UNIT_STAGES
from contracts.tiers import TierInputs


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

        return {
            "scaling": unit_tier.scaling_report([CaseOutcome.from_dict(r["outcome"]).stages for r in records])
        }
