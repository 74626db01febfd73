"""`NEURON_COMPILER=inductor`: partitions compiled by Inductor behind the same NEFF artifact and cache.

What must not change with the compiler: the device's bf16 rule (matmul-class inputs rounded,
fp32 accumulation), planted faults in compiled execution, declined ops as recorded fallbacks,
the artifact as a JSON aten graph (never generated code)."""

from __future__ import annotations

import json

import pytest
import torch

import backend
from backend import faults
from backend.cache import get_cache
from backend.neff import Artifact
from tests.backend.compile.neff_helpers import mlp_step, small_mlp, tiny_transformer, training_step


@pytest.fixture(autouse=True)
def inductor(monkeypatch):
    monkeypatch.setenv("NEURON_COMPILER", "inductor")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    faults.clear()


def _artifacts(cache_dir):
    return [Artifact.from_bytes(p.read_bytes()) for p in sorted(cache_dir.rglob("*.neff"))]


def test_matmul_inputs_are_rounded_to_bf16_as_in_eager(neff_cache_dir):
    """The rounding is fused into Inductor's kernels and still happens: the mm of a compiled
    graph equals eager's bit for bit, and differs from the unrounded product."""
    torch.manual_seed(0)
    x, w = torch.randn(8, 32), torch.randn(32, 16)

    def f(a, b):
        return torch.mm(a * 1.5, b).relu()

    eager = f(x.to("neuron"), w.to("neuron")).cpu()
    compiled = torch.compile(f, backend="neuron")(x.to("neuron"), w.to("neuron")).cpu()
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    assert not torch.equal(compiled, f(x, w))  # the unrounded product differs: rounding did happen
    arts = _artifacts(neff_cache_dir)
    assert arts and all(a.flags == {"precision": "bf16", "compiler": "inductor"} for a in arts)
    assert all(a.meta["inductor_seconds"] > 0 for a in arts)


def test_artifact_stays_a_json_aten_graph_and_reloads_in_a_new_cache(neff_cache_dir, monkeypatch, tmp_path):
    model, x = small_mlp().to("neuron"), torch.randn(4, 8).to("neuron")
    want, _ = mlp_step(torch.compile(model, backend="neuron"), x)
    for art in _artifacts(neff_cache_dir):
        body = json.loads(art.to_bytes().partition(b"\n")[2])
        targets = {n["target"] for n in body["graph"]["nodes"] if n["op"] == "call_function"}
        assert targets and all(t.startswith(("aten.", "prims.", "operator.getitem")) for t in targets)
    before = get_cache().counters.to_dict()
    get_cache().memory.clear()
    torch._dynamo.reset()
    got, _ = mlp_step(torch.compile(model, backend="neuron"), x)  # loaded from disk, compiled on load
    after = get_cache().counters.to_dict()
    assert after["compiles"] == before["compiles"] and after["hits_disk"] > before["hits_disk"]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_key_differs_from_the_interpreters(monkeypatch):
    from backend.neff.compiler import CompilerFlags

    assert CompilerFlags.current().compiler == "inductor"
    monkeypatch.setenv("NEURON_COMPILER", "interpreter")
    assert CompilerFlags.current().to_json() == {"precision": backend.neff.precision.current_mode()}
    monkeypatch.setenv("NEURON_COMPILER", "gcc")
    with pytest.raises(ValueError, match="NEURON_COMPILER"):
        CompilerFlags.current()


def test_declined_ops_still_run_eagerly_and_are_recorded(table_without_gelu):
    model = small_mlp().to("neuron")
    x = torch.randn(4, 8).to("neuron")
    with backend.collect_fallbacks() as eager_events:
        eager_out, eager_grads = mlp_step(model, x)
    with backend.collect_fallbacks() as events:
        out, grads = mlp_step(torch.compile(model, backend="neuron"), x)
    ops = lambda evs: sorted({(e.op, e.reason) for e in evs})  # noqa: E731
    assert ops(events) and ops(events) == ops(eager_events)
    torch.testing.assert_close(out, eager_out, rtol=1e-6, atol=1e-6)
    for g, eg in zip(grads, eager_grads):
        torch.testing.assert_close(g, eg, rtol=1e-5, atol=1e-6)


def test_a_compile_only_fault_fires_in_an_inductor_compiled_graph():
    model = small_mlp().to("neuron")
    x = torch.randn(4, 8).to("neuron")
    clean, _ = mlp_step(torch.compile(model, backend="neuron"), x)
    torch._dynamo.reset()
    faults.reset_hits()
    with faults.planted(
        op="aten.gelu.default", kind="substitute", kwargs={"approximate": "tanh"}, scope="compiled"
    ):
        faulted_out, _ = mlp_step(torch.compile(model, backend="neuron"), x)
        eager_out, _ = mlp_step(model, x)  # scope compiled: eager is untouched
    assert any(n > 0 for n in faults.hits().values())
    assert not torch.allclose(faulted_out, clean, rtol=0, atol=1e-7)
    torch.testing.assert_close(eager_out, clean, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_tiny_bert_training_step_matches_eager():
    """One model only: a cold Inductor cache compiles it with gcc (minutes on a loaded machine)."""
    model, batch = tiny_transformer("bert")
    model, batch = model.to("neuron"), {k: v.to("neuron") for k, v in batch.items()}
    eager_loss, eager_logits, eager_grads = training_step(model, batch)
    with backend.collect_fallbacks() as events:
        loss, logits, grads = training_step(torch.compile(model, backend="neuron"), batch)
    assert events == []
    torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits, eager_logits, rtol=1e-4, atol=1e-4)
    assert grads.keys() == eager_grads.keys() and len(grads) > 10
    for name in grads:
        torch.testing.assert_close(grads[name], eager_grads[name], rtol=1e-3, atol=1e-5, msg=name)
