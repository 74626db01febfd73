"""Dynamo never traces the device's own Python, so a compile verdict cannot depend on history.

Before the fix, a graph break left Dynamo's frame hook on while device ops ran eagerly, and it
compiled `backend.kernels._run` frames with guards on the device's storage table: `harness run
--tier representative` gave `compile: error, InternalTorchDynamoError: KeyError: <address>` for
HubertForCTC after DINOv3ViTBackbone, while HubertForCTC alone passed.
"""

from __future__ import annotations

import pytest
import torch

import backend
import backend.kernels
import backend.storage
from contracts.records import ModelSpec


class GraphBreak(torch.nn.Module):
    """A data-dependent branch (as HF models' label checks): Dynamo graph-breaks and runs the
    comparison eagerly on the device."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(n, n)

    def forward(self, x, labels):
        y = self.lin(x)
        if labels.max() >= 100:
            y = y * 2
        return y.sum()


def _cache_entries(fn) -> list:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return _debug_get_cache_entry_list(fn.__code__)


def test_dynamo_compiles_no_frame_of_the_device_after_a_graph_break():
    import torch._dynamo

    torch._dynamo.reset()
    for n in (4, 8):  # two models in one process, as a worker runs them
        model = torch.compile(GraphBreak(n).to("neuron"), backend="neuron")
        model(torch.randn(2, n, device="neuron"), torch.tensor([1, 2], device="neuron")).backward()
    for fn in (backend.kernels._run, backend.storage.cpu_view):
        assert _cache_entries(fn) == [], f"Dynamo compiled a frame of the device: {fn.__qualname__}"
    torch._dynamo.reset()


@pytest.mark.slow
def test_a_compile_verdict_is_the_same_alone_and_after_other_models():
    """HubertForCTC after DINOv3ViTBackbone in one process, as a worker ran them, and alone."""
    import json
    import subprocess
    import sys

    from harness.stages.check import check_model

    stages = ["load", "forward", "backward", "compile"]
    check_model(
        ModelSpec("catalog/dinov3_vit/DINOv3ViTBackbone", "dinov3_vit", "DINOv3ViTBackbone"),
        backend="neuron",
        stages=stages,
    )
    after = check_model(
        ModelSpec("catalog/hubert/HubertForCTC", "hubert", "HubertForCTC"), backend="neuron", stages=stages
    )
    alone = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "check",
            "hubert",
            "--architecture",
            "HubertForCTC",
            "--backend",
            "neuron",
            "--stages",
            *stages,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert alone.returncode in (0, 1), alone.stderr[-2000:]
    alone_stages = {n: s["status"] for n, s in json.loads(alone.stdout)["stages"].items()}
    assert {n: r.status.value for n, r in after.stages.items()} == alone_stages
    assert after.stages["compile"].status.value == "pass", after.stages["compile"].reason
