"""The compiled route for any dynamo backend: the AOT graphs it is handed, minimized by PyTorch's
accuracy minifier to the node whose compiled result differs from the reference.

Where the backend runs a compiled graph's calls op by op, the shadow sees them (route
`compiled_shadow`). Where it fuses them into kernels of its own, no call is visible, so:

1. capture: the model's compiled step runs once with AOTAutograd's own graphs kept (the forward
   and backward aten graphs the backend would be handed, run eagerly on the device) and the real
   device inputs each graph was called with;
2. judge each graph in execution order: compiled by the backend and run on those inputs, against
   the same graph computed on the CPU as the device computes (harness.rootcause.calls' gate);
3. the first graph that fails goes to `torch._functorch.fx_minifier.minifier` (what
   `torch._dynamo.repro.after_aot` runs at `TORCHDYNAMO_REPRO_LEVEL=4`, the accuracy level) with
   that accuracy test as its `module_fails`: it truncates the graph and replaces nodes by their
   eagerly computed values until no node can go. The last call of the minimal graph is the root
   cause (route `accuracy_minifier`); a minimal graph of several calls (a fusion that fails
   only together) is named in the record's evidence.

Each query compiles a graph, so the search is bounded by the row's deadline.
"""

from __future__ import annotations

import contextlib
import copy
import io
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from agents.quiet import quiet_transformers
from contracts.rootcause import RootCause
from harness.errors import NoLoss
from harness.rootcause import calls
from harness.rootcause.shadow import Finding, for_run
from harness.stages.run import StageRun
from harness.stages.step import restore_grads, stash_grads, train_mode, training_loss
from registry.encoding import encode_args


# A BaseException so the minifier's own `except Exception` cannot swallow it; caught in this module.
class _OutOfTime(BaseException):
    """The deadline passed inside the minifier: stop it."""


@dataclass
class Captured:
    kind: str  # forward | backward | inference
    gm: fx.GraphModule
    inputs: list[Any] | None = None  # the real device inputs of its first call (cloned)


@dataclass
class Judge:
    """Compile a graph with the backend and run it on device inputs; compare with the CPU."""

    backend: Callable
    device_type: str
    rounding: Any
    undeclared_rounding: bool
    deadline: float
    queries: int = 0
    last: dict[str, Any] = field(default_factory=dict)

    def __call__(self, gm: fx.GraphModule, inputs: list[Any]) -> bool:
        if time.monotonic() > self.deadline:
            raise _OutOfTime
        self.queries += 1
        cpu_inputs = calls.to_reference(list(inputs), self.device_type)
        on_cpu = _on_cpu(gm, self.device_type)
        ref = calls.recompute(on_cpu, tuple(cpu_inputs), {}, self.rounding, _results)
        if ref.error:
            return False  # the graph is not valid without the device (not the backend's failure)
        try:
            compiled = self.backend(copy.deepcopy(gm), list(inputs))
            with torch.no_grad():
                out = compiled(*inputs)
        except Exception as exc:  # noqa: BLE001 - the backend fails what the reference compiles
            if not _compiles_on_reference(on_cpu, cpu_inputs):
                return False  # a graph no compiler takes (the minifier's own making)
            self.last = {"kind": "error", "error_class": type(exc).__name__, "message": str(exc)[:300]}
            return True
        bad = calls.judge(calls.results(out), ref, self.undeclared_rounding)
        if bad is None:
            return False
        self.last = {"kind": "mismatch", "mismatch": bad[0], "evidence": bad[1]}
        return True


def _compiles_on_reference(gm: fx.GraphModule, inputs: list[Any]) -> bool:
    """Does the same graph compile and run through AOTAutograd on the CPU (`aot_eager`)?"""
    from torch._dynamo.backends.registry import lookup_backend

    try:
        with torch.no_grad():
            lookup_backend("aot_eager")(copy.deepcopy(gm), list(inputs))(*inputs)
    except Exception:  # noqa: BLE001
        return False
    return True


def _results(out: Any, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    return calls.results(out)


def _on_cpu(gm: fx.GraphModule, device_type: str) -> fx.GraphModule:
    """A copy of `gm` whose device arguments (factory calls' `device=`) name the CPU."""
    out = copy.deepcopy(gm)
    for node in out.graph.nodes:
        node.args = calls.to_reference(node.args, device_type)
        node.kwargs = calls.to_reference(node.kwargs, device_type)
    out.recompile()
    return out


# ------------------------------------------------------------------------------ capture


def capture(run: StageRun, train: bool) -> list[Captured]:
    """The AOT graphs of the model's step and the real inputs of each (AOTAutograd's default
    partition, the graphs run eagerly on the device)."""
    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd

    graphs: list[Captured] = []

    def keep(kind: str) -> Callable:
        def compiler(gm: fx.GraphModule, example_inputs: list) -> Callable:
            entry = Captured(kind, gm)
            graphs.append(entry)

            def run_graph(*args: Any) -> Any:
                if entry.inputs is None:
                    entry.inputs = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
                return gm(*args)

            return run_graph

        return compiler

    backend = aot_autograd(
        fw_compiler=keep("forward"), bw_compiler=keep("backward"), inference_compiler=keep("inference")
    )
    saved = stash_grads(run.model)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(run.model, backend=backend)
        with quiet_transformers(), train_mode(run.model) if train else contextlib.nullcontext():
            torch.manual_seed(run.seed)
            output = compiled(**run.kwargs)
            if train:
                with contextlib.suppress(NoLoss):
                    training_loss(output)[0].backward()
    finally:
        restore_grads(run.model, saved)
        torch._dynamo.reset()
    return [g for g in graphs if g.inputs is not None]


# ------------------------------------------------------------------------------ the route


def localize_compiled(run: StageRun, train: bool, deadline: float) -> tuple[RootCause, Finding | None]:
    """The compiled step's first failing graph, minimized (see the module docstring): the record,
    and the found call (None when not found)."""
    from torch._dynamo.backends.registry import lookup_backend
    from torch._functorch.fx_minifier import minifier

    shadow = for_run(run, deadline, only_compiled=True)  # the same rounding and tolerance as the shadow
    judge = Judge(
        lookup_backend(run.adapter.compile_backend),
        run.adapter.device_type,
        shadow.rounding,
        shadow.undeclared_rounding,
        deadline,
    )
    try:
        graphs = capture(run, train)
    except Exception as exc:  # noqa: BLE001 - the step does not run with AOTAutograd's own graphs
        why = f"the compiled step's graphs could not be captured: {type(exc).__name__}: {exc}"
        return RootCause.not_found(why[:300]), None
    try:
        for n, g in enumerate(graphs):
            if not judge(g.gm, g.inputs):
                continue
            with contextlib.redirect_stderr(io.StringIO()):
                small, inputs = minifier(
                    copy.deepcopy(g.gm), g.inputs, judge, dump_state=lambda gm, inps: None, skip_sanity=True
                )
            finding = _finding(small, list(inputs), g, judge, run)
            if finding is None:
                why = f"graph {n} ({g.kind}) fails compiled, but its minimal graph has no call"
                return RootCause.not_found(why, graphs=len(graphs)), None
            rc = finding.record("accuracy_minifier")
            ops = [str(x.target) for x in small.graph.nodes if x.op == "call_function"]
            rc.extra.update(graph=g.kind, graph_index=n, minimal_graph=ops, queries=judge.queries)
            return rc, finding
    except _OutOfTime:
        gave_up = f"time limit reached after {judge.queries} compiled queries"
        return RootCause.not_found("the accuracy minifier ran out of time", gave_up=gave_up), None
    why = f"each of the {len(graphs)} captured graphs matches the reference when compiled by the backend"
    return RootCause.not_found(why, queries=judge.queries), None


def _finding(
    small: fx.GraphModule, inputs: list[Any], g: Captured, judge: Judge, run: StageRun
) -> Finding | None:
    """The first call of the minimal graph that fails compiled alone, on the inputs the minimal
    graph gives it (computed eagerly on the device); the last call when none fails alone (a
    fusion that fails only together)."""
    nodes = [
        x
        for x in small.graph.nodes
        if x.op == "call_function" and isinstance(x.target, torch._ops.OpOverload)
    ]
    if not nodes:
        return None
    placeholders = [x for x in small.graph.nodes if x.op == "placeholder"]
    values: dict[fx.Node, Any] = dict(zip(placeholders, inputs))
    pick, alone = nodes[-1], False
    for x in small.graph.nodes:
        if x.op != "call_function":
            continue
        args, kwargs = _fetch(x, values)
        if x in nodes and not alone:
            one, one_inputs = _single(x, args, kwargs)
            if judge(one, one_inputs):
                pick, alone = x, True
                break
        values[x] = x.target(*args, **kwargs)
    if not alone:
        judge(small, list(inputs))  # the evidence is the whole minimal graph's
    args, kwargs = _fetch(pick, values)
    original = [x.name for x in g.gm.graph.nodes]
    module_path, source_line = calls.node_place(pick, calls.model_code_dirs(run.model))
    last = judge.last
    f = Finding(
        func=pick.target,
        phase="compiled",
        index=original.index(pick.name) if pick.name in original else -1,
        kind=last.get("kind", "mismatch"),
        args=calls.to_reference(tuple(args), run.adapter.device_type),
        kwargs=calls.to_reference(dict(kwargs), run.adapter.device_type),
        module_path=module_path,
        source_line=source_line,
        mismatch=last.get("mismatch"),
        evidence={**dict(last.get("evidence") or {}), "fails_alone": alone},
        error_class=last.get("error_class", ""),
        message=last.get("message", ""),
        facts=calls.tensor_facts(tuple(args), dict(kwargs)),
        encoded=encode_args(tuple(args), dict(kwargs)),
    )
    return f


def _single(node: fx.Node, args: tuple, kwargs: dict) -> tuple[fx.GraphModule, list[Any]]:
    """A graph of `node`'s call alone, its tensor arguments as placeholders."""
    graph = fx.Graph()
    inputs: list[Any] = []

    def place(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            inputs.append(x)
            return graph.placeholder(f"arg{len(inputs) - 1}")
        return x

    from torch.utils._pytree import tree_map

    out = graph.call_function(node.target, tree_map(place, args), tree_map(place, kwargs))
    n = len(node.target._schema.returns)
    graph.output(
        tuple(graph.call_function(operator.getitem, (out, i)) for i in range(n)) if n > 1 else (out,)
    )
    return fx.GraphModule(torch.nn.Module(), graph), inputs


def _fetch(node: fx.Node, values: dict[fx.Node, Any]) -> tuple[tuple, dict]:
    args = fx.node.map_arg(node.args, lambda n: values[n])
    kwargs = fx.node.map_arg(node.kwargs, lambda n: values[n])
    return tuple(args), dict(kwargs)
