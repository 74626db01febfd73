"""A test-only model tier of one tiny BERT (load, forward, backward), selected with
`--tier tests.harness.engine.model_tier:TIER`: the built-in model path
(harness.tiers.model_check.run_model_check) on a case list that needs no population file."""

from __future__ import annotations

from contracts.records import Case, ModelSpec
from contracts.status import FULL_STAGES


class OneModelTier:
    name = "one_model"
    stages = FULL_STAGES
    chunk_size = 1

    def cases(self, inputs) -> list[Case]:
        return [Case.for_spec(ModelSpec("catalog/bert", "bert", "BertModel"), self.name)]

    def execute(self, case: Case, backend: str):
        from harness.tiers.model_check import run_model_check

        return run_model_check(case, backend, self.stages)


TIER = OneModelTier()
