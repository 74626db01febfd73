"""Split an aten FX graph into compiled partitions and host-fallback nodes, by the lowering table.

`TableSupport` answers "does this node have a native lowering for its dtypes" from the lowering
table (`table.supports(op, dtypes)`). Nodes that are not supported stay in the outer graph and run
eagerly on the device, which records each as a CPU fallback exactly as eager execution does.

The supported nodes are grouped by *host level*: how many declined nodes lie on the longest path
from the graph's inputs to them. Along any path the level never falls, and it rises after each
declined node, so every path between two nodes of one level runs through supported nodes of that
level only: each group can be fused into one partition without a cycle (torch.fx's
`fuse_by_partitions` then builds the submodules). That takes one pass over the graph, where
torch.fx's `CapabilityBasedPartitioner` merges pairwise with a cycle search per merge - quadratic,
seconds per graph on a MoE training step. The partitions are as few as the declined
nodes allow along their longest chain: one when every node is supported.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.fx
from pydantic import Field
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from backend.data_files import DataModel, bundled, load_data
from backend.errors import UnsupportedGraphError
from backend.neff.format import _encode, target_name

PARTITION_PREFIX = "neff_"
VIEW_REFERENCE = "aten.as_strided.default"


class CompilerLowerings(DataModel):
    """``compiler_lowerings.yaml``: graph-level op packet -> the table op whose dtype rule applies."""

    equivalents: dict[str, str] = Field(default_factory=dict)


@functools.cache
def compiler_equivalents() -> dict[str, str]:
    """`compiler_lowerings.yaml` (read once): graph-level op packet -> the table op whose dtype
    rule applies."""
    return dict(load_data(CompilerLowerings, bundled("backend.neff", "compiler_lowerings.yaml")).equivalents)


def is_view_op(target: Any) -> bool:
    """An op whose output aliases an input without writing it (t, transpose, expand, slice...)."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


class LoweringTable(Protocol):
    version: str

    def supports(self, op: str, dtypes: Any) -> tuple[bool, str | None]: ...


def _tensor_dtypes(value: Any) -> list[torch.dtype]:
    if isinstance(value, torch.Tensor):
        return [value.dtype]
    if isinstance(value, (list, tuple)):
        return [d for v in value for d in _tensor_dtypes(v)]
    return []


def node_dtypes(node: torch.fx.Node) -> list[torch.dtype]:
    """dtypes the lowering decision depends on: tensor inputs, else the outputs (factories)."""
    dtypes: list[torch.dtype] = []
    for arg in [*node.args, *node.kwargs.values()]:
        for n in arg if isinstance(arg, (list, tuple)) else [arg]:
            if isinstance(n, torch.fx.Node):
                dtypes.extend(_tensor_dtypes(n.meta.get("val")))
    return dtypes or _tensor_dtypes(node.meta.get("val"))


class TableSupport(OperatorSupportBase):
    """OperatorSupport driven by the lowering table; remembers why each node was declined."""

    def __init__(self, table: LoweringTable) -> None:
        self.table = table
        self.declined: dict[str, str] = {}  # node name -> reason

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            src = node.args[0]
            return isinstance(src, torch.fx.Node) and self.is_node_supported(submodules, src)
        try:
            name = target_name(node.target)
            names = {n: n.name for n in node.all_input_nodes}
            _encode([*node.args, *node.kwargs.values()], names)
        except UnsupportedGraphError:
            self.declined[node.name] = "not-compilable"
            return False
        if not isinstance(node.meta.get("val"), (torch.Tensor, list, tuple)):
            self.declined[node.name] = "non-tensor-output"
            return False
        dtypes = node_dtypes(node)
        ok, reason = self.table.supports(name, dtypes)
        if not ok and reason == "no-lowering":
            packet = name.rsplit(".", 1)[0]
            reference = VIEW_REFERENCE if is_view_op(node.target) else compiler_equivalents().get(packet)
            if reference is not None:
                ok, reason = self.table.supports(reference, dtypes)
        if not ok:
            self.declined[node.name] = reason or "no-lowering"
        return bool(ok)


@dataclass
class PartitionedGraph:
    module: torch.fx.GraphModule  # outer graph: call_module neff_N nodes + host-fallback nodes
    partitions: list[str]  # submodule names of the compiled partitions
    declined: dict[str, str]  # outer node name -> why it was not lowered


def host_levels(
    gm: torch.fx.GraphModule, supported: Mapping[torch.fx.Node, bool]
) -> dict[torch.fx.Node, int]:
    """Supported node -> the number of declined nodes on the longest path to it (one pass, graph
    order is topological)."""
    after: dict[torch.fx.Node, int] = {}  # node -> level its users start from
    levels: dict[torch.fx.Node, int] = {}
    for node in gm.graph.nodes:
        level = max((after[n] for n in node.all_input_nodes), default=0)
        if supported.get(node, False):
            levels[node] = level
            after[node] = level
        else:
            after[node] = level + (node.op == "call_function")
    return levels


def partition_graph(gm: torch.fx.GraphModule, table: LoweringTable) -> PartitionedGraph:
    support = TableSupport(table)
    modules = dict(gm.named_modules())
    supported = {n: support.is_node_supported(modules, n) for n in gm.graph.nodes if n.op == "call_function"}
    groups: dict[int, dict[torch.fx.Node, None]] = {}
    for node, level in host_levels(gm, supported).items():
        groups.setdefault(level, {})[node] = None
    fused = fuse_by_partitions(gm, [groups[level] for level in sorted(groups)], prefix=PARTITION_PREFIX)
    names = [
        str(n.target)
        for n in fused.graph.nodes
        if n.op == "call_module" and str(n.target).startswith(PARTITION_PREFIX)
    ]
    return PartitionedGraph(fused, names, dict(support.declined))
