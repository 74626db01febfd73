"""The native fast path (backend.native) changes speed, never behaviour: the same results, executed
ops, fallback events, memory accounting and errors as the pure-Python device (NEURON_NATIVE=0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import backend
from backend import native

ROOT = Path(__file__).resolve().parents[2]

needs_native = pytest.mark.skipif(
    native.module() is None, reason=f"backend.native not loaded: {native.status()['reason']}"
)


def test_the_native_path_builds_where_a_compiler_is_present():
    if native.status()["enabled"] is False:
        pytest.skip("NEURON_NATIVE=0")
    status = native.status()
    missing = ("no C++ compiler", "ninja not found", "no Python headers")
    if not status["loaded"] and status["reason"].startswith(missing):
        pytest.skip(
            f"no toolchain on this machine, the device runs on the pure-Python path: {status['reason']}"
        )
    assert status["loaded"], status["reason"]
    assert native.module().is_installed()


#: one process per mode: a tiny BERT and Llama training step (AdamW) on neuron, with a table
#: that lacks gelu (fallbacks with frames) and a planted host-kernel gap (histc on int)
_WORKLOAD = r"""
import json, sys
import torch, backend
from backend import lowering
from transformers import BertConfig, BertForMaskedLM, LlamaConfig, LlamaForCausalLM

doc = lowering.current_table().to_dict()
for op in [k for k in doc["ops"] if k.startswith("aten.gelu")]:
    del doc["ops"][op]
doc["version"] += "+no-gelu"
lowering.set_table(lowering.parse_table(doc, "test"))
torch.set_num_threads(1)
out = {}
common = dict(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=64, max_position_embeddings=32)
builders = {"bert": lambda: BertForMaskedLM(BertConfig(**common)),
            "llama": lambda: LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, **common))}
for name, build in builders.items():
    torch.manual_seed(0)
    model = build().to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 128, (2, 16)).to("neuron")
    backend.clear_op_tracking()
    torch.neuron.reset_peak_memory_stats()
    with backend.collect_fallbacks() as events:
        for _ in range(2):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    hist = torch.histc(torch.tensor([1, 2, 2, 3], device="neuron"), bins=3, min=1, max=3)
    try:
        torch.mm(torch.ones(2, 3, device="neuron"), torch.ones(2, 3, device="neuron"))
        error = None
    except RuntimeError as exc:
        error = str(exc).splitlines()[0]
    out[name] = {
        "loss": loss.item(),
        "params": {k: v.detach().cpu().double().sum().item() for k, v in model.named_parameters()},
        "executed": backend.executed_ops(),
        "events": sorted([e.op, e.input_shapes, e.input_dtypes, e.reason, e.frame, e.count] for e in events),
        "memory": [torch.neuron.memory_allocated(), torch.neuron.max_memory_allocated()],
        "hist": hist.cpu().tolist(),
        "error": error,
    }
print(json.dumps({"native": backend.native.module() is not None, "out": out}))
"""


def _run(native_on: bool) -> dict:
    env = {**os.environ, "NEURON_NATIVE": "1" if native_on else "0", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _WORKLOAD], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_native
@pytest.mark.slow
def test_native_and_pure_python_devices_are_indistinguishable():
    fast, slow = _run(True), _run(False)
    assert fast["native"] and not slow["native"]
    for name in ("bert", "llama"):
        a, b = fast["out"][name], slow["out"][name]
        assert a["loss"] == b["loss"]  # bit for bit: the same kernels on the same payloads
        assert a["params"] == b["params"]
        assert a["executed"] == b["executed"]
        assert a["events"] == b["events"] and (name != "bert" or a["events"])  # BERT falls back on gelu
        assert a["memory"] == b["memory"]
        assert a["hist"] == b["hist"] == [1.0, 2.0, 1.0]
        assert a["error"] == b["error"] and a["error"]


@needs_native
def test_decisions_follow_the_precision_mode_and_the_table():
    x = torch.randn(8, 8)
    w = torch.randn(8, 8)
    dx, dw = x.to("neuron"), w.to("neuron")
    rounded = torch.mm(x.bfloat16().float(), w.bfloat16().float())
    assert torch.equal(torch.mm(dx, dw).cpu(), rounded)
    previous = backend.set_precision("exact")
    try:
        assert torch.equal(torch.mm(dx, dw).cpu(), torch.mm(x, w))  # cached decision was dropped
    finally:
        backend.set_precision(previous)
    assert torch.equal(torch.mm(dx, dw).cpu(), rounded)
    from backend import lowering

    table = lowering.current_table()
    doc = table.to_dict()
    del doc["ops"]["aten.mm"]
    doc["version"] += "+no-mm"
    lowering.set_table(lowering.parse_table(doc, "test"))
    try:
        with backend.collect_fallbacks() as events:
            torch.mm(dx, dw)
        assert [(e.op, e.reason) for e in events] == [("aten.mm.default", "no-lowering")]
    finally:
        lowering.set_table(table)
    with backend.collect_fallbacks() as events:
        torch.mm(dx, dw)
    assert events == []


@needs_native
def test_out_of_memory_from_the_native_path_is_the_device_error():
    x = torch.ones(1024, device="neuron")
    y = torch.ones(1024, device="neuron")
    previous = backend.set_memory_capacity(backend.memory.memory_allocated() + 1000)
    try:
        with pytest.raises(backend.NeuronOutOfMemoryError) as info:
            x * y  # the result (4 KiB) is adopted by the native path: accounted by backend.memory
        assert info.value.requested == 4096
        with pytest.raises(backend.NeuronOutOfMemoryError):
            torch.empty(2048, device="neuron")  # native allocation
    finally:
        backend.set_memory_capacity(previous)
    assert torch.equal((x * y).cpu(), torch.ones(1024))


@needs_native
def test_an_op_result_without_bytes_is_adopted_as_real_zeros():
    """sgn's gradient of a real input is an efficient zero tensor (no storage bytes); the native
    path adopted its empty storage as the payload, and reading the gradient died of SIGSEGV."""
    x = torch.randn(4, 5).to("neuron").requires_grad_()
    (grad,) = torch.autograd.grad(torch.sgn(x), x, torch.randn(4, 5).to("neuron"))
    assert torch.equal(grad.cpu(), torch.zeros(4, 5))
    zero = torch._efficientzerotensor((2, 3), dtype=torch.bfloat16, device="neuron")
    assert zero.dtype == torch.bfloat16 and torch.equal(zero.cpu(), torch.zeros(2, 3, dtype=torch.bfloat16))
