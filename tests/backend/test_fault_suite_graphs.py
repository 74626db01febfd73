"""The bundled fault suite's compile-only faults target ops that compiled graphs of real models hold.

A `scope: compiled` fault fires only where its op is a node of a compiled (AOT) forward or backward
graph. Attention reaches those graphs as SDPA's decomposition (`aten._safe_softmax`, never
`aten._softmax`), so a compile-only fault on an op no compiled graph holds can never be caught:
a suite bug this test finds.
"""

from __future__ import annotations

import collections

import pytest
import torch

import backend  # noqa: F401  (registers the neuron device and its compile backend)
import backend.compile as neuron_compile
from backend import faults

transformers = pytest.importorskip("transformers")


def _tiny_models():
    bert = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=128
    )
    llama = transformers.LlamaConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        vocab_size=128,
    )
    return [transformers.BertForMaskedLM(bert), transformers.LlamaForCausalLM(llama)]


@pytest.mark.slow
def test_every_compile_only_fault_of_the_suite_targets_an_op_of_a_compiled_training_step(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path / "neff"))
    faults.clear()
    graph_ops: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    original = neuron_compile.compile_graph

    def recording(gm, kind="forward", table=None):
        graph_ops[kind].update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return original(gm, kind, table)

    monkeypatch.setattr(neuron_compile, "compile_graph", recording)
    torch.manual_seed(0)
    for model in _tiny_models():
        torch._dynamo.reset()
        model = model.to("neuron")
        ids = torch.randint(0, 128, (2, 8), device="neuron")
        torch.compile(model, backend="neuron")(input_ids=ids, labels=ids).loss.backward()
    torch._dynamo.reset()
    held = set(graph_ops["forward"]) | set(graph_ops["backward"])
    assert "aten._safe_softmax.default" in graph_ops["forward"] and "aten._softmax.default" not in held
    compiled_only = [f for f in faults.load_suite() if f.scope == "compiled"]
    assert compiled_only
    missing = [
        (f.name, f.op)
        for f in compiled_only
        if f.op not in held and not any(op.startswith(f.op + ".") for op in held)
    ]
    assert missing == [], f"compile-only faults on ops no compiled graph holds: {missing}"
