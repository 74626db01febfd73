"""`torch.compile(backend="neuron")`: Dynamo -> AOTAutograd -> partition -> NEFF -> cache.

    model = torch.compile(model.to("neuron"), backend="neuron")

Forward and backward graphs (AOTAutograd) are each split by the lowering table: supported
nodes become partitions compiled to NEFF artifacts through the cache (memory, disk, shared);
the other nodes run eagerly on the device, which records them as CPU fallbacks as in eager.
Static shapes only: `dynamic=True` or symbolic shapes raise `DynamicShapeError`. A compile
failure raises `NeuronCompileError`, unless the eager fallback switch is on
(`NEURON_COMPILE_FALLBACK=eager` or `set_compile_fallback("eager")`): then the graph runs
eagerly and the failure is recorded (`compile_fallbacks()`, counter `eager_fallbacks`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)

from backend import faults, settings
from backend.cache import get_cache
from backend.errors import DynamicShapeError, NeuronCompileError, UnsupportedGraphError
from backend.neff import TensorSpec
from backend.neff.compiler import CompilerFlags, compile_partition, plan
from backend.neff.device import DEVICE, to_device, to_host
from backend.neff.partition import LoweringTable, partition_graph
from backend.neff.precision import cached_weight_rounding

log = logging.getLogger(__name__)
BACKEND_NAME = "neuron"
_FALLBACK_MODES = settings.COMPILE_FALLBACK_MODES

# --------------------------------------------------------------------------- fallback switch

_fallback_override: str | None = None
_fallback_events: list[CompileFallback] = []
_events_lock = threading.Lock()


@dataclass(frozen=True)
class CompileFallback:
    """A graph that ran eagerly because its compile failed (fallback switch on)."""

    graph: str  # forward | backward | inference
    error_class: str
    message: str
    n_nodes: int


def set_compile_fallback(mode: str | None) -> None:
    """`raise` (default) or `eager`; None returns to the environment's setting."""
    global _fallback_override
    if mode is not None and mode not in _FALLBACK_MODES:
        raise ValueError(f"compile fallback mode {mode!r}: use one of {_FALLBACK_MODES}")
    _fallback_override = mode


def compile_fallback_mode() -> str:
    """`set_compile_fallback`'s mode, else NEURON_COMPILE_FALLBACK (read on every call)."""
    return _fallback_override or settings.current().compile_fallback


def compile_fallbacks() -> list[CompileFallback]:
    with _events_lock:
        return list(_fallback_events)


def clear_compile_fallbacks() -> None:
    with _events_lock:
        _fallback_events.clear()


# --------------------------------------------------------------------------- lowering table


def _current_table() -> LoweringTable:
    from backend.lowering import current_table  # the device's table (NEURON_LOWERING_TABLE aware)

    return current_table()


# --------------------------------------------------------------------------- partitions at run time


class NeffModule(torch.nn.Module):
    """A compiled partition in the outer graph: neuron tensors in, one executable call, neuron out."""

    def __init__(self, executable: Any, tuple_output: bool, on_device: list[bool]) -> None:
        super().__init__()
        self.executable = executable
        self.tuple_output = tuple_output
        self.on_device = on_device  # per output: wrap as a neuron tensor (False: a host graph)

    def forward(self, *args: Any) -> Any:
        outs = (
            self.executable.run_device(args, self.on_device)
            if hasattr(self.executable, "run_device")
            else None
        )
        if outs is not None:  # backend.native: host views, the program and adoption in one call
            return tuple(outs) if self.tuple_output else outs[0]
        hosts = [to_host(a) for a in args]
        versions = {
            id(h): a._version for a, h in zip(args, hosts) if isinstance(a, torch.nn.Parameter) and h is not a
        }
        with cached_weight_rounding(versions):
            results = self.executable(*hosts)
        outs = [to_device(o) if dev else o for o, dev in zip(results, self.on_device)]
        return tuple(outs) if self.tuple_output else outs[0]


def _spec(node: Any) -> TensorSpec:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        raise UnsupportedGraphError(f"partition boundary value {node} is not a tensor")
    return TensorSpec.of(val)


def _compile_partition(
    outer: torch.fx.GraphModule, name: str, table: LoweringTable, flags: CompilerFlags
) -> None:
    call = next(n for n in outer.graph.nodes if n.op == "call_module" and n.target == name)
    sub: torch.fx.GraphModule = getattr(outer, name)
    inputs = [_spec(a) for a in call.args]
    out_arg = sub.graph.output_node().args[0]
    tuple_output = isinstance(out_arg, (tuple, list))
    outputs = [_spec(o) for o in (out_arg if tuple_output else [out_arg])]
    planned = plan(sub, inputs, table.version, flags)
    executable = get_cache().get_or_compile(
        planned[0], lambda: compile_partition(sub, inputs, outputs, table.version, flags, planned=planned)
    )
    out_nodes = out_arg if tuple_output else [out_arg]
    on_device = [n.meta["val"].device.type == DEVICE for n in out_nodes]
    setattr(outer, name, NeffModule(executable, tuple_output, on_device))


def compile_graph(
    gm: torch.fx.GraphModule, kind: str = "forward", table: LoweringTable | None = None
) -> torch.fx.GraphModule:
    """Partition an aten graph and compile each partition; returns the runnable outer graph."""
    table = table or _current_table()
    flags = CompilerFlags.current()
    parted = partition_graph(gm, faults.partition_table(table))  # faulted ops stay eager
    for name in parted.partitions:
        _compile_partition(parted.module, name, table, flags)
    parted.module.recompile()
    parted.module.meta["neuron_partitions"] = list(parted.partitions)
    parted.module.meta["neuron_declined"] = dict(parted.declined)
    log.debug("neuron %s graph: %d partitions, declined %s", kind, len(parted.partitions), parted.declined)
    return parted.module


def _aot_compiler(kind: str) -> Callable[[torch.fx.GraphModule, Sequence[Any]], Callable[..., Any]]:
    from torch._functorch.aot_autograd import make_boxed_func

    def compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        _reject_symbolic(example_inputs, gm)
        try:
            compiled = compile_graph(gm, kind)
        except DynamicShapeError:
            raise
        except Exception as exc:
            if compile_fallback_mode() != "eager":
                raise NeuronCompileError(f"neuron compile of the {kind} graph failed: {exc}") from exc
            _record_fallback(kind, exc, gm)
            return make_boxed_func(faults.compiled_runner(gm.forward))
        return make_boxed_func(faults.compiled_runner(compiled.forward))

    compiler.__name__ = f"neuron_{kind}_compiler"
    return compiler


def _record_fallback(kind: str, exc: BaseException, gm: torch.fx.GraphModule) -> None:
    event = CompileFallback(
        kind, type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else "", len(gm.graph.nodes)
    )
    with _events_lock:
        _fallback_events.append(event)
    get_cache().count_eager_fallback()
    warnings.warn(f"neuron: {kind} graph runs eagerly after a compile failure: {event.message}", stacklevel=2)


# --------------------------------------------------------------------------- static shapes


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(not isinstance(s, int) for s in (*value.shape, *value.stride()))
    return False


def _reject_symbolic(example_inputs: Sequence[Any], gm: torch.fx.GraphModule) -> None:
    vals = list(example_inputs) + [
        n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"
    ]
    if any(_is_symbolic(v) for v in vals):
        raise DynamicShapeError(
            "the neuron compiler only compiles static shapes: torch.compile(dynamic=True), "
            "mark_dynamic and other symbolic shapes are not supported; use dynamic=False "
            "(each new shape is then a new, cached compile)"
        )


# --------------------------------------------------------------------------- the Dynamo backend


#: AOTAutograd's tracing failures that Dynamo answers with a graph break and a re-trace (its
#: `exceptions_allowed_to_be_fallback`): a data-dependent op reached only in the backward (a
#: boolean-mask assignment's gradient is `grad[mask]`, aten.nonzero). Dynamo then re-traces the
#: frame and, for each enclosing wrapper frame (Module.__call__, transformers' decorators), hands
#: the backend the same graph again; tracing it again fails again, at seconds per trace of a large
#: model, as many times as there are wrapper frames.
_TRACE_FAILURES = (DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException)
_doomed: dict[Any, tuple[type[BaseException], tuple[Any, ...]]] = {}


def _graph_key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    """The graph's structure, independent of its placeholders' names (which follow the frame's local
    names, different in each wrapper frame), with its inputs' metadata and the grad mode."""
    index: dict[torch.fx.Node, int] = {}
    parts: list[Any] = [torch.is_grad_enabled()]
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        target = node.target
        if node.op == "placeholder":
            target = ""
        elif not isinstance(target, str):
            target = (
                f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}",
                id(target),
            )
        args = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: f"%{index[n]}")
        parts.append((node.op, target, repr(args)))
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            parts.append(
                (
                    tuple(value.shape),
                    tuple(value.stride()),
                    value.dtype,
                    value.device.type,
                    value.requires_grad,
                )
            )
        else:
            parts.append((type(value).__name__, repr(value)))
    return tuple(parts)


def neuron_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any
) -> Callable[..., Any]:
    """The Dynamo backend registered as `neuron` (entry point and on import)."""
    from torch._dynamo.backends.common import aot_autograd

    hide_device_from_dynamo()

    # As on the device, a new shape is a new static compile, never an automatic dynamic graph.
    torch._dynamo.config.automatic_dynamic_shapes = False
    _reject_symbolic(example_inputs, gm)
    key = _graph_key(gm, example_inputs)
    failed = _doomed.get(key)
    if failed is not None:  # the same graph failed tracing before: fail again without re-tracing it
        raise failed[0](*failed[1])
    fw = _aot_compiler("forward")
    backend = aot_autograd(
        fw_compiler=fw, bw_compiler=_aot_compiler("backward"), inference_compiler=_aot_compiler("inference")
    )
    try:
        with _no_fallback_records_while_tracing():
            return backend(gm, example_inputs, **kwargs)
    except _TRACE_FAILURES as exc:
        _doomed[key] = (
            type(exc),
            exc.args,
        )  # not the exception: its traceback holds the trace's fake tensors
        while len(_doomed) > 64:
            _doomed.pop(next(iter(_doomed)))
        raise


@contextlib.contextmanager
def _no_fallback_records_while_tracing() -> Iterator[None]:
    """AOTAutograd's fake-tensor tracing constant-folds small tensors (``lift_fresh_copy``) with
    real ops on the device; that is compile-time work, not a fallback of the program, so it is
    neither recorded nor an error in strict mode."""
    from backend import fallback

    with fallback.suspended():
        yield


@functools.cache
def hide_device_from_dynamo() -> None:
    """Dynamo must never trace the device's own Python (its dispatcher-level kernels), as it never
    traces a C++ kernel.

    When a compiled region graph-breaks, Dynamo runs the rest eagerly with its frame hook still
    installed, and every device op enters `backend.kernels._run` — a Python frame Dynamo would
    otherwise compile, guarding on the device's storage table (``_entries[<storage address>]``).
    Those guards then depended on which storages happened to be alive, so a model's compile
    verdict depended on the models run before it in the same process
    (``InternalTorchDynamoError: KeyError: <address>``). Skipping the package's directory (as
    Dynamo skips torch's own) runs device code eagerly under Dynamo at no eager cost.
    """
    from torch._dynamo import trace_rules

    trace_rules.add(__name__.split(".")[0])


@functools.cache
def register_dynamo_backend() -> None:
    """Make `torch.compile(backend="neuron")` resolve to `neuron_backend` (idempotent).

    When the package is installed, the `torch_dynamo_backends` entry point already does it, and
    registering again here would make Dynamo's entry-point loading fail on a duplicate name.
    """
    from importlib.metadata import entry_points

    hide_device_from_dynamo()
    if any(ep.name == BACKEND_NAME for ep in entry_points(group="torch_dynamo_backends")):
        return
    from torch._dynamo.backends import registry

    if BACKEND_NAME not in registry._COMPILER_FNS:
        registry.register_backend(neuron_backend, name=BACKEND_NAME)


if "torch._dynamo" in sys.modules:  # Dynamo resolving backend="neuron" imports this module first
    hide_device_from_dynamo()
