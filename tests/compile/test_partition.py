"""Partitioning by the lowering table with torch.fx's CapabilityBasedPartitioner (host graphs)."""

from __future__ import annotations

import torch

from backend.cache import get_cache
from backend.compile import compile_graph
from neff_helpers import RuleTable, mlp_with_cumsum


def test_unsupported_op_splits_the_graph(host_graph, rule_table, exact_precision):
    gm, args = host_graph
    out = compile_graph(gm, "forward", rule_table)
    parts = out.meta["neuron_partitions"]
    assert len(parts) == 2  # before and after the cumsum
    assert out.meta["neuron_declined"] == {"cumsum": "no-lowering"}
    calls = [n for n in out.graph.nodes if n.op == "call_function" and "cumsum" in str(n.target)]
    assert len(calls) == 1  # the declined op stays in the outer graph, run eagerly
    for got, want in zip(out(*args), mlp_with_cumsum(*args)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert get_cache().counters.compiles >= 2


def test_fully_supported_graph_is_one_partition(host_graph):
    gm, _ = host_graph
    out = compile_graph(gm, "forward", RuleTable(missing=()))
    assert len(out.meta["neuron_partitions"]) == 1 and out.meta["neuron_declined"] == {}


def test_dtype_outside_the_table_is_declined_with_reason():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda a, b: (a.double() * b.double()).float() + 1)(torch.ones(3), torch.ones(3))
    out = compile_graph(gm, "forward", RuleTable(missing=()))
    assert "dtype" in out.meta["neuron_declined"].values()
    torch.testing.assert_close(out(torch.ones(3), torch.ones(3)), torch.full((3,), 2.0))
