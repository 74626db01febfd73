"""A test-only tier of single aten ops on the backend's own device, each case labeled with its op
like a unit case (``--tier tests.harness.engine.op_tier:TIER``, chunks of 4 through execute_many).

The case list is a JSON file given as `--models FILE` ([{"id": ..., "op": "sort", "n": 6}, ...]);
without it, one case per op. On the reference backend the same op runs on the CPU, so a planted
device fault is blamed on the backend. Faults come from the environment (NEURON_FAULTS): the
worker imports the device, which loads them.
"""

from __future__ import annotations

import json

from contracts.records import Case, StageResult
from contracts.status import Status

#: op -> (the overload a unit case would name, what the case runs on a 1-d tensor of n elements)
OPS = {
    "sort": ("aten.sort.default", lambda torch, x: x.flip(0).sort()),
    "topk": ("aten.topk.default", lambda torch, x: x.topk(2)),
    "softmax": ("aten._softmax.default", lambda torch, x: torch.softmax(x, -1)),
    "add": ("aten.add.Tensor", lambda torch, x: x + 1),
}


class OpTier:
    name = "op_cases"
    stages = ("op",)
    chunk_size = 4
    timeout = 60.0

    def setup(self, backend: str) -> None:
        import torch  # noqa: F401  (in the start-up: a case's limit counts from its start)

        from contracts.backends import get_backend

        get_backend(backend)  # imports the device (and its planted faults) in the start-up

    def cases(self, inputs) -> list[Case]:
        specs = [{"id": name, "op": name} for name in OPS]
        if inputs.models:
            with open(inputs.models) as fh:
                specs = json.load(fh)
        return [
            Case(
                case_id=s["id"],
                tier=self.name,
                payload={"op": OPS[s["op"]][0], "name": s["op"], "n": int(s.get("n", 6))},
                model_ids=[s["id"]],
                weight=1.0,
            )
            for s in specs
        ]

    def execute(self, case: Case, backend: str) -> list[StageResult]:
        import torch

        from contracts.backends import get_backend

        device = get_backend(backend).device
        x = torch.arange(float(case.payload["n"]), device=device)
        OPS[case.payload["name"]][1](torch, x)
        return [StageResult("op", Status.PASS)]

    def execute_many(self, cases: list[Case], backend: str) -> list[list[StageResult]]:
        return [self.execute(c, backend) for c in cases]


class OpTierAgain(OpTier):
    """The same cases as another tier (a nightly's later tier running the same ops)."""

    name = "op_cases_again"


TIER = OpTier()
AGAIN = OpTierAgain()
