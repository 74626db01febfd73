"""Adaptive eager: eager ops collected into small graphs, compiled in the background, and cached.

    with backend.adaptive.adaptive_eager():     # or NEURON_ADAPTIVE_EAGER=1, or enable()
        loss = model(x).sum(); loss.backward()
        print(loss.item())                       # a sync point: pending work runs first

A `TorchDispatchMode` defers each lowerable, out-of-place op on neuron tensors: its outputs are
allocated at once (shapes from a per-signature meta cache) and the op joins the current *run*.
View ops only touch metadata and run at once; any other op (in-place, transfers, ``.item()``,
``.cpu()``, print, ops without a lowering, random ops) is a sync point: the run is flushed first,
then the op runs as plain eager (so fallbacks are recorded exactly as in eager). A flushed run
whose compiled form is cached executes as one call; otherwise it is interpreted op by op on the
host payloads and, once seen ``NEURON_ADAPTIVE_MIN_REPEATS`` times, queued for a background
compile through the NEFF cache, so compiling overlaps with the execution that goes on meanwhile.
Results equal plain eager: the same aten kernels run on the same payloads with the same
precision rule, in the same order.
"""

from __future__ import annotations

import contextlib
import operator
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode

from backend import faults, settings, storage
from backend.neff import TensorSpec
from backend.neff.compiler import CompilerFlags, compile_partition, plan
from backend.neff.format import dtype_name
from backend.neff.precision import current_mode, wrap

DEVICE = "neuron"
MAX_RUN_OPS = 64
_NEVER_DEFER = {
    "aten._to_copy.default",
    "aten.copy_.default",
    "aten._copy_from.default",
    "aten._copy_from_and_resize.default",
    "aten._local_scalar_dense.default",
    "aten.lift_fresh.default",
    "aten.detach.default",
}
#: allocations and unannotated views read no data: they run at once without ending the run
_NO_SYNC = {
    "aten.empty.memory_format",
    "aten.empty_strided.default",
    "aten.new_empty.default",
    "aten.new_empty_strided.default",
    "aten.empty_like.default",
    "aten._unsafe_view.default",
    "aten._reshape_alias.default",
}


@dataclass
class AdaptiveStats:
    deferred_ops: int = 0
    runs: int = 0
    runs_compiled: int = 0  # runs executed by a compiled graph
    runs_interpreted: int = 0
    compiles_queued: int = 0
    compiles_done: int = 0


@dataclass
class _Run:
    tensors: list[torch.Tensor] = field(default_factory=list)  # every device tensor involved
    index: dict[int, int] = field(default_factory=dict)  # id(tensor) -> position
    entries: list[tuple] = field(
        default_factory=list
    )  # (op, name, args template, kwargs template, out positions)

    def ref(self, t: torch.Tensor) -> tuple[str, int]:
        pos = self.index.get(id(t))
        if pos is None:
            pos = self.index[id(t)] = len(self.tensors)
            self.tensors.append(t)
        return ("$t", pos)


def _template(run: _Run, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return run.ref(value)
    if isinstance(value, (list, tuple)):
        return tuple(_template(run, v) for v in value)
    return value


def _fill(template: Any, values: list[Any]) -> Any:
    if isinstance(template, tuple):
        if len(template) == 2 and template[0] == "$t":
            return values[template[1]]
        return [_fill(v, values) for v in template]
    return template


class AdaptiveEager(TorchDispatchMode):
    """The mode; one per process is enough (see `enable()`)."""

    def __init__(self, min_repeats: int | None = None) -> None:
        super().__init__()
        self.min_repeats = min_repeats or settings.current().adaptive_min_repeats
        self.stats = AdaptiveStats()
        self._run = _Run()
        self._lock = threading.RLock()
        self._deferrable: dict[Any, bool] = {}
        self._meta: dict[tuple, list[tuple] | None] = {}
        self._compiled: dict[tuple, Any] = {}
        self._seen: dict[tuple, int] = {}
        self._queued: set[tuple] = set()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="neuron-adaptive-compile")

    # ------------------------------------------------------------------ dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        with self._lock:
            if self._can_defer(func, args, kwargs):
                outs = self._defer(func, args, kwargs)
                if outs is not None:
                    return outs
            if not _is_view(func) and str(func) not in _NO_SYNC:
                self._flush()
        return func(*args, **kwargs)

    def _op_deferrable(self, func: Any) -> bool:
        ok = self._deferrable.get(func)
        if ok is None:
            schema = getattr(func, "_schema", None)
            ok = bool(
                isinstance(func, torch._ops.OpOverload)
                and func.namespace == "aten"
                and str(func) not in _NEVER_DEFER
                and str(func) not in _NO_SYNC
                and schema is not None
                and not schema.is_mutable
                and schema.returns
                and all(
                    r.alias_info is None and str(r.type) in ("Tensor", "Tensor[]") for r in schema.returns
                )
                and torch.Tag.nondeterministic_seeded not in func.tags
                and torch.Tag.dynamic_output_shape not in func.tags
                and torch.Tag.data_dependent_output not in func.tags
            )
            self._deferrable[func] = ok
        return ok

    def _can_defer(self, func: Any, args: tuple, kwargs: dict) -> bool:
        if not self._op_deferrable(func) or faults.faulted(str(func)):  # a planted fault runs eagerly
            return False
        tensors = [a for a in _flat(args) + _flat(list(kwargs.values())) if isinstance(a, torch.Tensor)]
        if not tensors or any(t.device.type != DEVICE for t in tensors):
            return False
        from backend.lowering import current_table

        return current_table().supports(str(func), [t.dtype for t in tensors])[0]

    def _defer(self, func: Any, args: tuple, kwargs: dict) -> Any:
        sig = (func, _signature(args), _signature(kwargs))
        metas = self._meta.get(sig, ())
        if metas == ():
            metas = self._meta[sig] = _infer(func, args, kwargs)
        if metas is None:
            return None  # no meta kernel: run it eagerly instead
        outs = [storage.new_tensor(shape, dtype, stride) for shape, stride, dtype in metas]
        run = self._run
        entry = (
            func,
            str(func),
            _template(run, args),
            {k: _template(run, v) for k, v in kwargs.items()},
            tuple(run.ref(o)[1] for o in outs),
        )
        run.entries.append(entry)
        self.stats.deferred_ops += 1
        from backend import fallback

        fallback.note_executed(str(func))
        if len(run.entries) >= MAX_RUN_OPS:
            self._flush()
        returns = func._schema.returns
        if str(returns[0].type) == "Tensor[]":
            return outs
        return tuple(outs) if len(returns) > 1 else outs[0]

    # ------------------------------------------------------------------ runs
    def flush(self) -> None:
        """Run everything pending (a sync point)."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        run = self._run
        if not run.entries:
            return
        self._run = _Run()
        specs = tuple((tuple(t.shape), tuple(t.stride()), t.dtype) for t in run.tensors)
        key = (
            tuple((e[1], e[2], tuple(sorted(e[3].items())), e[4]) for e in run.entries),
            specs,
            current_mode(),
        )
        hosts = [storage.cpu_view(t) for t in run.tensors]
        self.stats.runs += 1
        exe = self._compiled.get(key)
        if exe is not None:
            self.stats.runs_compiled += 1
            exe(*hosts)
            return
        self.stats.runs_interpreted += 1
        mode = current_mode()
        for func, name, a, k, outs in run.entries:
            result = wrap(func, name, mode)(*_fill(a, hosts), **{n: _fill(v, hosts) for n, v in k.items()})
            for pos, r in zip(outs, result if isinstance(result, (list, tuple)) else [result]):
                hosts[pos].copy_(r)
        seen = self._seen[key] = self._seen.get(key, 0) + 1
        if seen >= self.min_repeats and key not in self._queued:
            self._queued.add(key)
            self.stats.compiles_queued += 1
            self._pool.submit(
                self._compile, key, run.entries, [TensorSpec(s, st, dtype_name(d)) for s, st, d in specs]
            )

    def _compile(self, key: tuple, entries: list[tuple], specs: list[TensorSpec]) -> None:
        """Background: the run as an FX graph (ops + copies into outputs) through the NEFF cache."""
        from backend.cache import get_cache

        graph = torch.fx.Graph()
        inputs = [graph.placeholder(f"t{i}") for i in range(len(specs))]
        for func, _name, a, k, outs in entries:
            node = graph.call_function(
                func, tuple(_fill(a, inputs)), {n: _fill(v, inputs) for n, v in k.items()}
            )
            if (
                len(outs) == 1
                and not str(func._schema.returns[0].type) == "Tensor[]"
                and len(func._schema.returns) == 1
            ):
                graph.call_function(torch.ops.aten.copy_.default, (inputs[outs[0]], node))
            else:
                for i, pos in enumerate(outs):
                    item = graph.call_function(operator.getitem, (node, i))
                    graph.call_function(torch.ops.aten.copy_.default, (inputs[pos], item))
        graph.output(None)
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        flags = CompilerFlags(precision=key[2])
        planned = plan(gm, specs, _table_version(), flags)
        exe = get_cache().get_or_compile(
            planned[0], lambda: compile_partition(gm, specs, [], _table_version(), flags, planned=planned)
        )
        with self._lock:
            self._compiled[key] = exe
            self.stats.compiles_done += 1

    def wait_for_compiles(self) -> None:
        """Block until queued background compiles are done (benchmarks and tests)."""
        self._pool.submit(lambda: None).result()

    def __enter__(self) -> AdaptiveEager:
        _install_print_sync()
        _modes.append(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        self.flush()
        self._pool.shutdown(wait=False)  # queued compiles still finish; their results land in the NEFF cache
        with contextlib.suppress(ValueError):
            _modes.remove(self)
        return super().__exit__(*exc)


def _table_version() -> str:
    from backend.lowering import current_table

    return current_table().version


def _flat(values: Any) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out.extend(_flat(v))
        else:
            out.append(v)
    return out


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), tuple(value.stride()), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _signature(v)) for k, v in value.items())
    return value


def _to_meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(v) for v in value)
    return value


def _infer(func: Any, args: tuple, kwargs: dict) -> list[tuple] | None:
    """Output (shape, stride, dtype) of an op from its meta kernel, or None when it has none."""
    try:
        out = func(*_to_meta(args), **{k: _to_meta(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001 - any failure on meta means "no meta kernel": the op runs eagerly
        return None
    outs = out if isinstance(out, (list, tuple)) else [out]
    if not all(isinstance(o, torch.Tensor) for o in outs):
        return None
    return [(tuple(o.shape), tuple(o.stride()), o.dtype) for o in outs]


def _is_view(func: Any) -> bool:
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


# --------------------------------------------------------------------------- switches

_active: AdaptiveEager | None = None
_modes: list[AdaptiveEager] = []  # every mode entered and not exited (print flushes them all)
_print_patched = False


def _install_print_sync() -> None:
    """Printing a tensor disables dispatch modes and reads payloads directly: flush before it."""
    global _print_patched
    if _print_patched:
        return
    import torch._tensor_str as tensor_str

    original = tensor_str._str

    def _str_after_sync(self: torch.Tensor, *args: Any, **kwargs: Any) -> str:
        if self.device.type == DEVICE:
            for mode in list(_modes):
                mode.flush()
        return original(self, *args, **kwargs)

    tensor_str._str = _str_after_sync
    _print_patched = True


def enable(min_repeats: int | None = None) -> AdaptiveEager:
    """Turn adaptive eager on for this thread (and autograd's) until `disable()`."""
    global _active
    if _active is None:
        _active = AdaptiveEager(min_repeats)
        _active.__enter__()
    return _active


def disable() -> None:
    global _active
    if _active is not None:
        mode, _active = _active, None
        mode.__exit__(None, None, None)


def active() -> AdaptiveEager | None:
    return _active


def synchronize() -> None:
    """A sync point: run pending work (torch.neuron.synchronize calls this)."""
    for mode in list(_modes):
        mode.flush()


@contextlib.contextmanager
def adaptive_eager(min_repeats: int | None = None) -> Iterator[AdaptiveEager]:
    mode = AdaptiveEager(min_repeats)
    with mode:
        yield mode


def enable_from_env() -> None:
    """`NEURON_ADAPTIVE_EAGER=1` turns adaptive eager on at `import backend`."""
    if settings.current().adaptive_eager:
        enable()
