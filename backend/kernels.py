"""Kernels of the `neuron` device: a few explicit ones and one boxed fallback for every other op.

Explicit: allocation (``empty.memory_format``, ``empty_strided``), transfers (``_copy_from``,
``_copy_from_and_resize``, ``clone``), metadata-only views (``view``, ``as_strided``, ``_reshape_alias``),
``resize_``, ``set_``, ``native_dropout`` (so dropout draws from the device generator) and the
SDPA backend choice. Everything else goes through :func:`run_op`: inputs are seen as CPU views of
their payloads, the lowering table decides native vs. fallback (a fallback is recorded), the CPU
kernel computes, and results come back as device tensors (``out=``/in-place arguments are written
in place and returned in schema order).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from pydantic import Field

from backend import fallback, faults, lowering, precision, storage
from backend.data_files import DataModel, bundled, load_data
from backend.errors import DataFileError, NeuronUnsupportedError

_CPU = torch.device("cpu")
_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)

#: the device's random generator (seeded by torch.neuron.manual_seed and torch.manual_seed)
generator = torch.Generator()


@dataclass(slots=True)
class OpInfo:
    """What the fallback needs to know about an op overload, computed once from its schema."""

    name: str
    arg_index: dict[str, int]
    arg_names: tuple[str, ...]
    mutable: tuple[tuple[int, str], ...]  # (position, name) of written arguments
    written: frozenset[int]
    returns_written: bool  # some return is a written argument (out= / in-place)
    returns_arg: tuple[int | None, ...]  # per return: position of the written argument it aliases
    view: bool  # some return aliases an input without writing it
    has_generator: bool
    rounded: tuple[tuple[int, str], ...]  # (position, name) rounded to bf16 in precision mode
    call: object  # the C++ callable of the overload (skips OpOverload.__call__)


_infos: dict = {}
_keep: list = []


def op_info(op) -> OpInfo:
    info = _infos.get(id(op))
    if info is not None:
        return info
    schema = op._schema
    name = f"{schema.name.replace('::', '.')}.{schema.overload_name or 'default'}"
    args = schema.arguments
    arg_index = {a.name: i for i, a in enumerate(args)}
    mutable = tuple(
        (i, a.name) for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write
    )
    sets = {}
    for i, a in enumerate(args):
        if a.alias_info is not None and a.alias_info.is_write:
            for s in a.alias_info.before_set:
                sets[s] = i
    returns_arg, view = [], False
    for r in schema.returns:
        ai = r.alias_info
        if ai is None:
            returns_arg.append(None)
        elif ai.is_write:
            returns_arg.append(next((sets[s] for s in ai.before_set if s in sets), None))
        else:
            returns_arg.append(None)
            view = True
    rounded = tuple((arg_index[n], n) for n in precision.rounded_args(name) if n in arg_index)
    info = OpInfo(
        name=name,
        arg_index=arg_index,
        arg_names=tuple(a.name for a in args),
        mutable=mutable,
        written=frozenset(i for i, _ in mutable),
        returns_written=any(r is not None for r in returns_arg),
        returns_arg=tuple(returns_arg),
        view=view,
        has_generator="generator" in arg_index,
        rounded=rounded,
        call=getattr(op, "_op", op),
    )
    _infos[id(op)] = info
    _keep.append(op)  # ids stay unique only while the op object lives
    return info


_Tensor = torch.Tensor


def _conv_list(a, call_dtypes, call_devs, fresh):
    out = []
    for x in a:
        if isinstance(x, _Tensor) and not x.is_cpu:
            call_dtypes.append(x.dtype)
            call_devs.append(x)
            out.append(storage.cpu_view(x, fresh))
        else:
            out.append(x)
    return out


def _conv(a, dtypes, devs, fresh):
    """One argument to its CPU form (device tensors -> CPU views of their payloads)."""
    if isinstance(a, _Tensor):
        if a.is_cpu:
            return a
        dtypes.append(a.dtype)
        devs.append(a)
        return storage.cpu_view(a, fresh)
    if type(a) is list or type(a) is tuple:
        if a and (isinstance(a[0], _Tensor) or a[0] is None):
            return _conv_list(a, dtypes, devs, fresh)
        return a
    if type(a) is torch.device and a.type != "cpu":
        return _CPU
    return a


def _check_result(r: torch.Tensor) -> None:
    if r.layout is not torch.strided:
        raise NeuronUnsupportedError("sparse tensors", f"an op produced a {r.layout} tensor")
    if r.is_nested:
        raise NeuronUnsupportedError("NestedTensor")


def _wrap(r, inputs: list[torch.Tensor] | None, made: dict):
    """CPU result -> device tensor. Results aliasing an input payload become device aliases."""
    if isinstance(r, _Tensor):
        if not r.is_cpu:
            return r
        if r.layout is not torch.strided or r.is_nested:
            _check_result(r)
        if inputs is None and not made:
            return storage.from_cpu(r)
        st = r.untyped_storage()
        key = st._cdata
        base = made.get(key)
        if base is None and inputs:
            for d in inputs:
                if storage.payload_of(d)._cdata == key:
                    base = d
                    break
        if base is not None:
            if base.dtype != r.dtype:  # view_as_real / view_as_complex / view(dtype): same bytes
                t = storage._create([0], r.dtype)
                storage.set_layout_to(t, base.untyped_storage(), r.size(), r.stride(), r.storage_offset())
                return t
            return storage.alias(base, r.size(), r.stride(), r.storage_offset())
        t = storage.from_cpu(r)
        made[key] = t
        return t
    if isinstance(r, (list, tuple)):
        made = {} if not made else made
        made["_"] = None  # several results may share one fresh storage: track them
        out = [_wrap(x, inputs, made) for x in r]
        return tuple(out) if isinstance(r, tuple) else out
    return r


def _sync_written(dev, cpu) -> None:
    """After an op wrote ``cpu`` (a view of ``dev``'s payload), bring ``dev``'s metadata along."""
    if isinstance(dev, _Tensor):
        if dev.is_cpu:
            return
        if cpu.untyped_storage()._cdata != storage.payload_of(dev)._cdata:
            storage.replace_payload(dev, cpu.untyped_storage())
        elif (
            cpu.size() != dev.size()
            or cpu.stride() != dev.stride()
            or cpu.storage_offset() != dev.storage_offset()
        ):
            storage.sync_payload_size(dev)
        else:
            return
        storage.set_layout(dev, cpu.size(), cpu.stride(), cpu.storage_offset())
    elif isinstance(dev, (list, tuple)):
        for d, c in zip(dev, cpu):
            _sync_written(d, c)


_support: dict = {}  # (op name, dtypes) -> (ok, reason) for the table in force


def _decisions_changed(*_ignored) -> None:
    """The table, the precision mode or the planted faults changed: forget cached decisions."""
    _support.clear()
    from backend import native

    mod = native.module()
    if mod is not None and mod.is_installed():
        mod.invalidate_decisions()


lowering.on_table_change(_decisions_changed)
precision.on_change(_decisions_changed)
_faulted: frozenset = frozenset()  # overloads with a planted fault (backend.faults); empty: no cost


def _set_faulted(names: frozenset) -> None:
    global _faulted
    _faulted = names
    _decisions_changed()  # a faulted op must reach `_run` (the native path never applies faults)


faults.on_change(_set_faulted)

#: what backend.native's C++ path may do with an op: run it without Python (FAST), the same with
#: the bf16 auto-cast of some arguments (FAST_ROUNDED), or hand it to `_run` (SLOW)
SLOW, FAST, FAST_ROUNDED = 0, 1, 2


def _native_decision(op, dtypes) -> tuple[int, tuple[int, ...]]:
    """Asked once per (op, device input dtypes) by the native path (then cached there until
    `_decisions_changed`): FAST only for a plain native lowering, so every fallback, every
    device-RNG op and every fault still goes through `_run`; plus the positions to round."""
    info = _infos.get(id(op))
    if info is None:
        info = op_info(op)
    name = info.name
    if info.has_generator or (_faulted and name in _faulted):
        return SLOW, ()
    key = (name, *dtypes)
    decision = _support.get(key)
    if decision is None:
        decision = _support[key] = lowering.current_table().supports(name, list(dtypes))
    if not decision[0]:
        return SLOW, ()
    if info.rounded and precision._mode == "bf16":
        return FAST_ROUNDED, tuple(i for i, _ in info.rounded)
    return FAST, ()


_executed = fallback._executed
_cpu_view = storage.cpu_view
_STRIDED = torch.strided


def _run(op, *args, _neuron_compute=None, **kwargs):
    """Run one op for the device: decide native vs. fallback, compute on the CPU, wrap results.

    The hot path of the whole device (every op of every model goes through here), hence the
    inlined argument conversion and caches. ``_neuron_compute`` replaces the CPU computation for
    device-only ops such as ``convolution_overrideable`` that have no CPU kernel of their own.
    """
    info = _infos.get(id(op))
    if info is None:
        info = op_info(op)
    dtypes: list = []
    devs: list = []
    written = info.written
    cargs = list(args)
    i = 0
    for a in args:
        if isinstance(a, _Tensor):
            if not a.is_cpu:
                dtypes.append(a.dtype)
                devs.append(a)
                cargs[i] = _cpu_view(a, i in written)
        elif a.__class__ is list or a.__class__ is tuple or a.__class__ is torch.device:
            cargs[i] = _conv(a, dtypes, devs, i in written)
        i += 1
    if kwargs:
        ckw = {k: _conv(v, dtypes, devs, info.arg_index.get(k) in written) for k, v in kwargs.items()}
    else:
        ckw = kwargs
    name = info.name
    _executed[name] = _executed.get(name, 0) + 1
    key = (name, *dtypes)
    decision = _support.get(key)
    if decision is None:
        decision = _support[key] = lowering.current_table().supports(name, dtypes)
    if not decision[0]:
        fallback.record_fallback(name, args, kwargs, decision[1])
    if info.rounded and precision._mode == "bf16":
        for i, n in info.rounded:
            if i < len(cargs):
                if isinstance(cargs[i], _Tensor):
                    cargs[i] = precision.round_bf16(cargs[i])
            elif isinstance(ckw.get(n), _Tensor):
                ckw[n] = precision.round_bf16(ckw[n])
    if info.has_generator:
        i = info.arg_index["generator"]
        if i < len(cargs):
            if cargs[i] is None:
                cargs[i] = generator
        elif ckw.get("generator") is None:
            ckw["generator"] = generator
    call = _neuron_compute or info.call
    if _faulted and name in _faulted:
        call = faults.intercept(info, call, cargs, ckw, decision[0])
    try:
        result = call(*cargs, **ckw)
    except NotImplementedError:
        gap_dtype = _HOST_GAPS.get(name.rsplit(".", 1)[0])
        if _neuron_compute is not None or gap_dtype is None:
            raise
        result = _call_with_upcast(info.call, cargs, ckw, gap_dtype)
    except RuntimeError as exc:
        # A wrapped-number tensor (``x * 2.0`` inside a composite kernel) reaches Python as a
        # number; the overload packet resolves it to the Scalar overload, as PyTorch would.
        if _neuron_compute is not None or "Expected a value of type 'Tensor'" not in str(exc):
            raise
        result = op._overloadpacket(*cargs, **ckw)
    if written:
        for i, n in info.mutable:
            if i < len(args):
                _sync_written(args[i], cargs[i])
            elif n in kwargs:
                _sync_written(kwargs[n], ckw[n])
    if not info.returns_written:
        if result.__class__ is _Tensor and not info.view:
            if not result.is_cpu:
                return result
            if result.layout is not _STRIDED or result.is_nested:
                _check_result(result)
            return storage.from_cpu(result)
        return _wrap(result, devs if info.view else None, {})
    # out= / in-place: return the written device arguments, in schema order
    outs = result if isinstance(result, (tuple, list)) and len(info.returns_arg) > 1 else (result,)
    final = []
    for pos, r in zip(info.returns_arg, outs):
        if pos is None:
            final.append(_wrap(r, devs, {}))
        else:
            final.append(args[pos] if pos < len(args) else kwargs[info.arg_names[pos]])
    return tuple(final) if len(info.returns_arg) > 1 else final[0]


class HostGap(DataModel):
    compute_dtype: str  # a floating dtype the CPU kernel has, e.g. float32


class HostKernelGaps(DataModel):
    """``host_kernel_gaps.yaml``: op packet -> the dtype its CPU kernel computes integer inputs in."""

    version: int
    ops: dict[str, HostGap] = Field(default_factory=dict)


def _load_host_gaps() -> dict[str, torch.dtype]:
    text, source = bundled("backend", "host_kernel_gaps.yaml")
    gaps: dict[str, torch.dtype] = {}
    for op, gap in load_data(HostKernelGaps, (text, source)).ops.items():
        dtype = getattr(torch, gap.compute_dtype, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise DataFileError(
                source, op, f"key 'compute_dtype': {gap.compute_dtype!r} is not a floating dtype"
            )
        gaps[op] = dtype
    return gaps


_HOST_GAPS = _load_host_gaps()


def _call_with_upcast(call, cargs: list, ckw: dict, dtype: torch.dtype):
    """Run a CPU kernel that lacks the inputs' integer dtype in ``dtype``, then cast back."""

    def up(a):
        if isinstance(a, _Tensor) and not (a.is_floating_point() or a.is_complex()):
            return a.to(dtype)
        return a

    first = next((a for a in cargs if isinstance(a, _Tensor)), None)
    kw = {k: up(v) for k, v in ckw.items()}
    result = call(*[up(a) for a in cargs], **kw)
    out = ckw.get("out")
    if isinstance(out, _Tensor) and kw["out"] is not out:  # out= variant: write the real out
        out.resize_(kw["out"].shape)
        out.copy_(kw["out"])
        return out
    if isinstance(result, _Tensor) and first is not None and result.dtype != first.dtype:
        return result.to(first.dtype)
    return result


def run_op(op, args: tuple, kwargs: dict, compute=None):
    """:func:`_run` with explicit argument tuples (for explicit kernels)."""
    return _run(op, *args, _neuron_compute=compute, **kwargs)


#: the boxed fallback registered for every op without a kernel: ``fn(op, *args, **kwargs)``
boxed_fallback = _run


def direct_kernel(op):
    """A kernel bound to one op (registered for structured ops, skipping ``empty`` + ``.out``)."""
    return functools.partial(_run, op)
