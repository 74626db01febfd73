"""Simulated device memory: live bytes are accounted, freed on tensor death, and capped."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import backend
from backend import settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def capacity():
    previous = backend.set_memory_capacity(None)
    yield
    backend.set_memory_capacity(previous)


def test_bytes_are_accounted_and_freed_when_the_tensor_dies():
    gc.collect()
    base = torch.neuron.memory_allocated()
    x = torch.empty(256, 4, device="neuron")  # 4 KiB
    assert torch.neuron.memory_allocated() == base + 4096
    view = x[1:].t()  # views share the storage: no new bytes
    assert torch.neuron.memory_allocated() == base + 4096
    del x
    assert torch.neuron.memory_allocated() == base + 4096  # still alive through the view
    del view
    assert torch.neuron.memory_allocated() == base


def test_results_of_ops_and_parameters_are_accounted():
    gc.collect()
    base = torch.neuron.memory_allocated()
    lin = torch.nn.Linear(16, 16).to("neuron")
    params = 16 * 16 * 4 + 16 * 4
    assert torch.neuron.memory_allocated() == base + params
    y = lin(torch.ones(2, 16, device="neuron"))
    assert torch.neuron.memory_allocated() >= base + params + y.numel() * 4
    del lin, y
    gc.collect()
    assert torch.neuron.memory_allocated() == base


def test_out_of_memory_names_request_capacity_and_use(capacity):
    gc.collect()
    keep = torch.empty(1000, device="neuron")
    in_use = torch.neuron.memory_allocated()
    backend.set_memory_capacity(in_use + 10_000)
    with pytest.raises(backend.NeuronOutOfMemoryError) as info:
        torch.empty(1 << 20, device="neuron")
    err = info.value
    assert isinstance(err, torch.OutOfMemoryError)
    assert err.requested == 4 << 20 and err.capacity == in_use + 10_000 and err.in_use == in_use
    text = str(err)
    assert str(4 << 20) in text and str(in_use + 10_000) in text and str(in_use) in text
    assert "NEURON_MEMORY_CAPACITY" in text
    assert torch.neuron.memory_allocated() == in_use  # the failed allocation left no trace
    with pytest.raises(torch.OutOfMemoryError):
        torch.ones(2000, 2000, device="neuron") @ torch.ones(2000, 2, device="neuron")
    del keep


def test_op_results_past_capacity_raise_oom(capacity):
    x = torch.ones(100, 100, device="neuron")
    backend.set_memory_capacity(torch.neuron.memory_allocated() + 100)
    with pytest.raises(backend.NeuronOutOfMemoryError):
        x @ x


@pytest.mark.parametrize(
    "text,expected",
    [("4096", 4096), ("96GiB", 96 << 30), ("512 MiB", 512 << 20), ("1.5GB", 1_500_000_000), ("2k", 2000)],
)
def test_parse_bytes(text, expected):
    assert settings.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-5", "0", "12 parsecs"])
def test_parse_bytes_rejects_garbage(text):
    with pytest.raises(ValueError):
        settings.parse_bytes(text)


def test_default_capacity_is_96_gib_and_env_var_sets_it():
    assert settings.DEFAULT_MEMORY_CAPACITY == 96 << 30
    code = textwrap.dedent(
        """
        import json, torch, backend
        cap = backend.memory_capacity()
        try:
            torch.empty(1 << 19, device="neuron")  # 2 MiB > 1 MiB
            outcome = "allocated"
        except torch.OutOfMemoryError as exc:
            outcome = type(exc).__name__
        print(json.dumps({"capacity": cap, "outcome": outcome}))
        """
    )
    env = {**os.environ, "NEURON_MEMORY_CAPACITY": "1MiB"}
    env.pop("NEURON_PRECISION", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"capacity": 1 << 20, "outcome": "NeuronOutOfMemoryError"}


def test_fallback_arguments_are_freed_with_the_op_not_by_a_gc_pass():
    """Recording a fallback walks stack frames; a frame kept in a reference cycle would keep the
    op's arguments (and their device memory) alive until the garbage collector runs. The frame
    search goes furthest when no user frame is found: code run with `python -c`."""
    code = textwrap.dedent(
        """
        import gc, json, torch, backend
        gc.disable()
        base = torch.neuron.memory_allocated()
        x = torch.randn(64, 64).to("neuron")
        with backend.collect_fallbacks() as events:
            y = torch.nn.functional.hardswish(x.double())  # float64: a dtype fallback
        del x, y
        leaked = torch.neuron.memory_allocated() - base
        print(json.dumps({"frames": [e.frame for e in events], "leaked": leaked}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"frames": ["<unknown>"], "leaked": 0}
