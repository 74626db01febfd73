"""A test-only model tier of one tiny BERT with a masked-LM head (load, forward, backward,
numerics), selected with `--tier tests.harness.rootcause.model_tier:TIER`: the built-in model path
(harness.tiers.model_check.run_model_check, which localizes backend failures) on a case list that
needs no population file."""

from __future__ import annotations

from contracts.records import Case, ModelSpec

SPEC = ModelSpec("catalog/bert", "bert", "BertForMaskedLM")


class OneModelTier:
    name = "one_model"
    stages = ("load", "forward", "backward", "numerics")
    chunk_size = 1

    def cases(self, inputs) -> list[Case]:
        return [Case.for_spec(SPEC, self.name)]

    def execute(self, case: Case, backend: str):
        from harness.tiers.model_check import run_model_check

        return run_model_check(case, backend, self.stages)


TIER = OneModelTier()
