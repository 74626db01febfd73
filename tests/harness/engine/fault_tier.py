"""A test-only tier whose cases run single ops on the neuron device
(``--tier tests.harness.engine.fault_tier:TIER``).

Faults come from the environment (NEURON_FAULTS), as in a real faulted run: the worker process
imports the device, which loads them.
"""

from __future__ import annotations

from contracts.records import Case, StageResult
from contracts.status import Status

OPS = {
    "sort": lambda torch: torch.arange(6.0, device="neuron").flip(0).sort(),
    "softmax": lambda torch: torch.softmax(torch.ones(2, 4, device="neuron"), -1),
    "add": lambda torch: torch.ones(3, device="neuron") + 1,
}
ATEN = {
    "sort": "aten.sort.default",
    "softmax": "aten._softmax.default",
    "add": "aten.add.Tensor",
}  # as unit cases name it


class FaultTier:
    name = "fault_ops"
    stages = ("op",)
    chunk_size = 1

    def setup(self, backend: str) -> None:
        import torch  # noqa: F401

        import backend as _device  # noqa: F401  (registers neuron and loads NEURON_FAULTS)

    def cases(self, inputs) -> list[Case]:
        return [
            Case(case_id=name, tier=self.name, payload={"op": ATEN[name]}, model_ids=[name]) for name in OPS
        ]

    def execute(self, case: Case, backend: str) -> list[StageResult]:
        import torch

        OPS[case.case_id](torch)
        return [StageResult("op", Status.PASS)]


TIER = FaultTier()
