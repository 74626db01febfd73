"""Partitioning by the lowering table: supported nodes grouped by host level (host graphs)."""

from __future__ import annotations

import torch

from backend.cache import get_cache
from backend.compile import compile_graph
from tests.backend.compile.neff_helpers import RuleTable, mlp_with_cumsum


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


def _graph(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*args)


def _partition_nodes(fn, x):
    """Partition name -> the ops it holds (before compiling, while partitions are graphs)."""
    from backend.neff.partition import partition_graph

    parted = partition_graph(_graph(fn, x), RuleTable())
    return {
        name: [
            str(n.target).split(".")[1]
            for n in getattr(parted.module, name).graph.nodes
            if n.op == "call_function"
        ]
        for name in parted.partitions
    }


def test_nodes_independent_of_the_declined_op_share_its_upstream_partition(exact_precision):
    """Branches that do not depend on a declined op join one partition, whatever their position:
    partitions follow how many declined ops lie before a node, not graph order."""

    def fn(x):
        before = x * 2
        after = torch.cumsum(before, 0) + 1
        independent = x.exp()  # traced after the cumsum, needs nothing from it
        return after, independent

    x = torch.randn(5)
    parts = _partition_nodes(fn, x)
    assert len(parts) == 2
    by_op = {op: name for name, ops in parts.items() for op in ops}
    assert by_op["mul"] == by_op["exp"] != by_op["add"]
    out = compile_graph(_graph(fn, x), "forward", RuleTable())
    for got, want in zip(out(x), fn(x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_node_fed_by_both_sides_of_a_declined_op_is_not_fused_with_its_producer(exact_precision):
    """a -> cumsum -> c and a -> c: fusing a and c would make the partition need its own output
    (a cycle through the host op). They must land in two partitions and still compute the same."""

    def fn(x):
        a = x.sin()
        c = a + torch.cumsum(a, 0)
        return c * a

    x = torch.randn(6)
    by_op = {op: name for name, ops in _partition_nodes(fn, x).items() for op in ops}
    assert by_op["sin"] != by_op["add"] and by_op["add"] == by_op["mul"]
    out = compile_graph(_graph(fn, x), "forward", RuleTable())
    torch.testing.assert_close(out(x), fn(x), rtol=0, atol=0)


def test_chained_declined_ops_give_one_partition_per_level(exact_precision):
    def fn(x):
        y = torch.cumsum(x * 2, 0)
        z = torch.cumsum(y.relu(), 0)
        return z - 1

    x = torch.randn(7)
    out = compile_graph(_graph(fn, x), "forward", RuleTable())
    assert len(out.meta["neuron_partitions"]) == 3
    assert sum(1 for n in out.graph.nodes if "cumsum" in str(n.target)) == 2
    torch.testing.assert_close(out(x), fn(x), rtol=0, atol=0)
