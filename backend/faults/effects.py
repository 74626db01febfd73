"""The eager device's side of a fault: do the predicates hold for this call, and apply the effect.

One definition of each effect serves eager and compiled execution: the compiler keeps faulted
nodes out of its partitions, so they run here too (with the compiled flag set).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal as _signal
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from backend import settings
from backend.errors import NeuronFaultError
from backend.faults import planting
from backend.faults.planting import _context, _hits, _logged
from backend.faults.spec import VALUE_KINDS, Fault


def _arg(info: Any, args: list, kwargs: dict, name: str) -> Any:
    i = info.arg_index.get(name)
    if i is not None and i < len(args):
        value = args[i]
    else:
        value = kwargs.get(name)
    if isinstance(value, (list, tuple)):
        value = next((v for v in value if isinstance(v, torch.Tensor)), None)
    return value


def _matches(f: Fault, info: Any, args: list, kwargs: dict, compiled: bool) -> bool:
    if (f.scope == "eager" and compiled) or (f.scope == "compiled" and not compiled):
        return False
    if f.dtypes:
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        tensors += [
            t
            for a in (*args, *kwargs.values())
            if isinstance(a, (list, tuple))
            for t in a
            if isinstance(t, torch.Tensor)
        ]
        if not any(t.dtype in f.dtypes for t in tensors):
            return False
    for c in f.when:
        t = _arg(info, args, kwargs, c.arg)
        if not isinstance(t, torch.Tensor) or not c.holds(t):
            return False
    return True


def _slice(f: Fault, t: torch.Tensor) -> torch.Tensor | None:
    """The part of `t` the fault corrupts (None: nothing, e.g. not floating or index out of range)."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
        return None
    if f.index is None:
        return t
    dim, at = f.index
    if not -t.dim() <= dim < t.dim():
        return None
    size = t.shape[dim]
    i = 0 if at == "first" else size - 1 if at == "last" else at
    if not -size <= i < size:
        return None
    return t.select(dim, i)


def _corrupt(f: Fault, t: torch.Tensor) -> bool:
    """Apply a value fault to `t` in place; True when something changed."""
    part = _slice(f, t)
    if part is None:
        return False
    if f.kind == "nan":
        part.fill_(float("nan"))
        return True
    if f.pattern == "scale":
        part.mul_(1.0 + f.rel)
        return True
    seed = zlib.crc32(f.name.encode())
    gen = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, part.shape, generator=gen).to(part.dtype).mul_(2).sub_(1)
    part.mul_(signs.mul_(f.rel).add_(1.0))
    return True


def _outputs(f: Fault, result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result] if f.output in (None, 0) else []
    if isinstance(result, (list, tuple)):
        if f.output is None:
            return [r for r in result if isinstance(r, torch.Tensor)]
        return (
            [result[f.output]]
            if f.output < len(result) and isinstance(result[f.output], torch.Tensor)
            else []
        )
    return []


def _fired(f: Fault, op: str, compiled: bool) -> None:
    _hits[f.name] += 1
    key = (f.name, compiled)
    if key in _logged:
        return
    _logged.add(key)
    path = settings.current().fault_log  # read when a fault first fires: a benchmark sets it per run
    if path is not None:
        line = (
            json.dumps(
                {
                    "fault": f.name,
                    "op": op,
                    "kind": f.kind,
                    "compiled": compiled,
                    "pid": os.getpid(),
                    "time": time.time(),
                }
            )
            + "\n"
        )
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)


def _hang(f: Fault) -> None:
    deadline = None if f.seconds is None else time.monotonic() + f.seconds
    while deadline is None or time.monotonic() < deadline:
        time.sleep(0.05 if deadline is None else min(0.05, max(0.0, deadline - time.monotonic())))


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _host(t: torch.Tensor) -> torch.Tensor:
    from backend import storage

    return t if t.is_cpu else storage.cpu_view(t)


def intercept(
    info: Any,
    call: Callable[..., Any],
    args: list,
    kwargs: dict,
    native: bool,
    host: Callable[[torch.Tensor], torch.Tensor] = _same,
) -> Callable[..., Any]:
    """The eager device's hook for a faulted op: record a lost lowering now, and return the
    computation with the fault's effect (``call`` itself when no fault's predicates match).
    ``host`` gives the CPU tensor a value fault writes to (the tensor itself on the eager path)."""
    compiled = _context.compiled > 0
    inside = _context.inside
    matched = [
        f
        for f in planting._by_op.get(info.name, ())
        if f.name not in inside and _matches(f, info, args, kwargs, compiled)
    ]
    if not matched:
        return call
    from backend import fallback

    for f in matched:
        if f.kind == "fallback":
            _fired(f, info.name, compiled)
            if native:
                fallback.record_fallback(info.name, args, kwargs, "no-lowering")
    effects = [f for f in matched if f.kind != "fallback"]
    if not effects:
        return call

    def faulted_call(*cargs: Any, **ckw: Any) -> Any:
        cargs, ckw = list(cargs), dict(ckw)
        for f in effects:
            if f.kind in ("raise", "hang", "crash"):
                _fired(f, info.name, compiled)
                if f.kind == "raise":
                    raise NeuronFaultError(info.name, f.name, f.message)
                if f.kind == "hang":
                    _hang(f)
                else:
                    sys.stderr.flush()
                    os.kill(os.getpid(), getattr(_signal, f.signal))
                    time.sleep(5)  # the signal is delivered at the next bytecode boundary
            elif f.kind == "substitute":
                for name, value in f.kwargs.items():
                    i = info.arg_index.get(name)
                    if i is not None and i < len(cargs):
                        cargs[i] = value
                    else:
                        ckw[name] = value
                _fired(f, info.name, compiled)
            elif f.input is not None:
                i = info.arg_index.get(f.input)
                positional = i is not None and i < len(cargs)
                value = cargs[i] if positional else ckw.get(f.input)
                if isinstance(value, torch.Tensor):
                    copy = value.clone()
                    if _corrupt(f, host(copy)):
                        _fired(f, info.name, compiled)
                        if positional:
                            cargs[i] = copy
                        else:
                            ckw[f.input] = copy
        result = call(*cargs, **ckw)
        for f in effects:
            if f.kind in VALUE_KINDS and f.input is None:
                if any([_corrupt(f, host(t)) for t in _outputs(f, result)]):
                    _fired(f, info.name, compiled)
        return result

    return faulted_call


# Ops with only a CompositeExplicitAutograd kernel reach the device decomposed (aten._grouped_mm as
# mm.out, aten.sort.default as sort.stable): the device never sees them. While a fault is planted on
# one, a device kernel of its own runs the same decomposition on the device with the fault around it;
# the kernel's Library is destroyed with the last such fault, which drops the registration.
_composite_cache: dict[str, bool] = {}
_library: Any = None
_registered: frozenset[str] = frozenset()


def _schema_name(name: str) -> str:
    _, packet, overload = name.split(".")
    return f"aten::{packet}" + ("" if overload == "default" else f".{overload}")


def is_composite(name: str) -> bool:
    """Does the device receive this overload only decomposed (before any fault kernel of ours)?"""
    hit = _composite_cache.get(name)
    if hit is None:
        full, has = _schema_name(name), torch._C._dispatch_has_kernel_for_dispatch_key
        try:
            hit = has(full, "CompositeExplicitAutograd") and not any(
                has(full, k) for k in ("CPU", "PrivateUse1", "CompositeExplicitAutogradNonFunctional")
            )
        except RuntimeError:  # a TorchScript-only overload (sort.int): not a dispatcher op at all
            hit = False
        _composite_cache[name] = hit
    return hit


def _register_composites(names: frozenset[str]) -> None:
    global _library, _registered
    wanted = frozenset(n for n in names if is_composite(n))
    if wanted == _registered:
        return
    if _library is not None:
        _library._destroy()
        _library = None
    if wanted:
        lib = torch.library.Library("aten", "IMPL")
        done = set()
        for name in sorted(wanted):
            _, packet, overload = name.split(".")
            try:
                lib.impl(
                    _schema_name(name).removeprefix("aten::"),
                    composite_kernel(getattr(getattr(torch.ops.aten, packet), overload)),
                    "PrivateUse1",
                )
                done.add(name)
            except RuntimeError:  # an overload the dispatcher cannot take a kernel for: never a device op
                _composite_cache[name] = False
        _library = lib
        wanted = frozenset(done)
    _registered = wanted


_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


@dataclass(frozen=True)
class _OpArgs:
    """What `intercept` reads of an op (the eager device passes its OpInfo, which has both)."""

    name: str
    arg_index: dict[str, int]


def composite_kernel(op: Any) -> Callable[..., Any]:
    """A device kernel for a faulted op the device otherwise receives decomposed (see
    is_composite): the decomposition runs on the device as before, with the op's faults
    around it, and the ops it decomposes into do not apply those faults again."""
    schema = op._schema
    info = _OpArgs(
        f"aten.{schema.name.removeprefix('aten::')}.{schema.overload_name or 'default'}",
        {a.name: i for i, a in enumerate(schema.arguments)},
    )

    def decomposed(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_COMPOSITE, *args, **kwargs)

    def faulted_composite(*args: Any, **kwargs: Any) -> Any:
        call = intercept(info, decomposed, list(args), kwargs, True, _host)
        previous = _context.inside
        _context.inside = previous | {f.name for f in planting._by_op.get(info.name, ())}
        try:
            return call(*args, **kwargs)
        finally:
            _context.inside = previous

    return faulted_composite


planting.on_change(_register_composites)
