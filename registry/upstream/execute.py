"""Run one upstream case (an op_db sample of one op and dtype) on the backend and on the CPU
reference, and classify it: pass, fail, error, or skipped with a reason from the closed list.

Per case, two stages:

* ``forward``: the CPU reference runs twice with the same seed (outputs that differ make it
  ``reference-error``, as Dynamo's ``eager_two_runs_differ``), then the device runs the same
  sample; outputs are compared with the per-dtype tolerances of registry/data/tolerances.yaml,
  never stricter than PyTorch's own toleranceOverride for the op, loosened by the backend's
  precision mode for matmul-class ops. A sample that matched but fell back to the CPU is
  ``skipped: no-native-lowering``, never a pass.
* ``backward`` (ops PyTorch checks gradients of, in that dtype): gradients of the sample's
  differentiable outputs (with seeded output gradients) w.r.t. the inputs PyTorch marks as
  requiring grad, device against CPU, judged the same way.

Nothing here raises for a problem of the op, the sample or the backend: every payload gets its
rows. A crash or a hang is the runner's to record (the worker dies, the case gets a crash row).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only

from contracts.backends import fallback_count, fallback_ops
from contracts.records import StageResult
from contracts.status import UPSTREAM_STAGES, Status, UpstreamSkip
from contracts.tolerance import Tolerance
from registry.encoding import DTYPE_ABBREVS
from registry.replay import _close
from registry.tolerances import tolerance_for
from registry.upstream import opinfos

STAGES = UPSTREAM_STAGES
_SAMPLE_CACHE_GROUPS = 4  # (op, dtype) sample lists kept per worker: chunks arrive grouped


@dataclass
class Context:
    """What a worker sets up once: the backend adapter, its precision mode, its device."""

    adapter: Any
    mode: str = "exact"
    samples: OrderedDict[tuple[str, str, str], list[Any] | BaseException] = field(default_factory=OrderedDict)
    pinned: dict[tuple[str, str, str], list[frozenset[int]]] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return self.adapter.device

    @property
    def device_type(self) -> str:
        return self.adapter.device_type

    def watch_ops(self) -> _OpsSeen | contextlib.nullcontext:
        """The aten ops a block dispatches, when the precision mode loosens tolerances per op (a
        bf16 auto-cast applies to matmul-class ops only); nothing to watch in exact mode."""
        return _OpsSeen() if self.mode != "exact" else contextlib.nullcontext(None)

    def samples_of(self, op: Any, dtype: torch.dtype) -> list[Any]:
        key = (op.name, op.variant_test_name, opinfos.dtype_name(dtype))
        if key not in self.samples:
            try:
                self.samples[key] = opinfos.generate_samples(op, dtype)
            except Exception as exc:  # noqa: BLE001 - reported per case as a reference error
                self.samples[key] = exc
            while len(self.samples) > _SAMPLE_CACHE_GROUPS:
                self.pinned.pop(self.samples.popitem(last=False)[0], None)
        self.samples.move_to_end(key)
        found = self.samples[key]
        if isinstance(found, BaseException):
            raise found
        return found

    def pinned_of(self, op: Any, dtype: torch.dtype, index: int) -> frozenset[int]:
        """Which tensors of sample `index` stay on the CPU (opinfos.cpu_pinned), learnt once per group."""
        key = (op.name, op.variant_test_name, opinfos.dtype_name(dtype))
        if key not in self.pinned:
            self.pinned[key] = opinfos.cpu_pinned(op, dtype, self.samples_of(op, dtype))
        found = self.pinned[key]
        return found[index] if index < len(found) else frozenset()


class _OpsSeen(TorchDispatchMode):
    """Records the op overloads dispatched inside the block (``str`` of each, e.g. aten.mm.default)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


def _seen(watch: Any) -> list[str]:
    return sorted(watch.ops) if isinstance(watch, _OpsSeen) else []


# Private control flow: a sample that cannot run here, caught in this module and recorded as a skip.
class _Skip(Exception):
    def __init__(self, reason: UpstreamSkip, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


# -------------------------------------------------------------------- samples, calls, comparison


def _short(exc: BaseException) -> str:
    import re

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return re.sub(r"0x[0-9a-fA-F]+", "0x?", text)[:300]


def declared_unsupported(exc: BaseException) -> str | None:
    """The feature, when the backend raised its 'declared unsupported' error (a NotImplementedError
    carrying a ``feature``, as backend.NeuronUnsupportedError), also as the cause of another error."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, NotImplementedError) and getattr(exc, "feature", None):
            return str(exc.feature)
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _map_sample(
    sample: Any,
    fn: Callable[[torch.Tensor], torch.Tensor],
    device: torch.device | None,
    keep: frozenset[int] = frozenset(),
) -> Any:
    """A copy of the sample with fn applied to every tensor; with `device`, device arguments that
    name the CPU (samples are generated for the CPU) name `device` instead. Tensors at the
    positions in `keep` (opinfos.map_sample's order: those op_db pins to the CPU) are cloned as
    they are instead."""

    def other(key: str | None, x: Any) -> Any:
        if device is not None:
            if isinstance(x, torch.device) and x.type == "cpu":
                return device
            if key == "device" and isinstance(x, str) and x.split(":")[0] == "cpu":
                return device
        return x

    with torch.no_grad():
        return opinfos.map_sample(sample, lambda i, t: _no_grad_clone(t) if i in keep else fn(t), other)


def _names_device(sample: Any, device_type: str) -> bool:
    """Whether the device's copy of a sample reaches the device at all: a tensor on it or a device
    argument naming it. op_db has factory samples without ``device=`` (``arange(1, 3, 1)``); on the
    device, as in PyTorch's own test_compare_cpu, they just run on the CPU: no finding either way."""
    leaves, _ = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    if any(isinstance(x, torch.Tensor) and x.device.type == device_type for x in leaves):
        return True
    if any(isinstance(x, torch.device) and x.type == device_type for x in leaves):
        return True
    named = sample.kwargs.get("device") if isinstance(sample.kwargs, dict) else None
    return isinstance(named, str) and named.split(":")[0] == device_type


def _clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(t.requires_grad)


def _no_grad_clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def _call(op: Any, sample: Any, seed: int, device_type: str = "cpu") -> Any:
    opinfos.seed_everything(seed, device_type)
    return sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))


def _leaves(value: Any) -> list[Any]:
    return tree_flatten(value)[0]


def _plain(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    return t.resolve_conj().resolve_neg()


#: dtypes CPU kernels cannot compare (torch.equal, abs): compared after a lossless upcast
_UPCAST = {torch.complex32: torch.complex64}


def _comparable(a: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    up = _UPCAST.get(e.dtype) or (
        torch.float32 if e.dtype.itemsize == 1 and e.dtype.is_floating_point else None
    )
    return (a.to(up), e.to(up)) if up is not None else (a, e)


def _same(a: Any, b: Any) -> bool:
    """Exactly equal (NaN equal to NaN): the reference run against itself."""
    fa, fb = _leaves(a), _leaves(b)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            x, y = _plain(x), _plain(y)
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            x, y = _comparable(x, y)
            if x.dtype.is_floating_point or x.dtype.is_complex:
                if not torch.equal(torch.nan_to_num(x.cpu()), torch.nan_to_num(y.cpu())) or not torch.equal(
                    x.isnan(), y.isnan()
                ):
                    return False
            elif not torch.equal(x, y):
                return False
        elif not _same_scalar(x, y):
            return False
    return True


def _same_scalar(x: Any, y: Any) -> bool:
    try:
        return bool(x == y) or (x != x and y != y)
    except Exception:  # noqa: BLE001 - objects without equality: compare their types
        return type(x) is type(y)


def _tolerance(
    dtype: torch.dtype, mode: str, ops_run: list[str], override: opinfos.ToleranceOverride | None
) -> Tolerance:
    abbrev = DTYPE_ABBREVS.get(dtype, "")
    tol = tolerance_for("", abbrev, mode)
    for name in ops_run:  # the precision mode loosens the dtypes of the ops it applies to
        t = tolerance_for(name, abbrev, mode)
        if t.atol_rms > tol.atol_rms or t.rtol > tol.rtol:
            tol = t
    if override and not tol.exact and (dtype.is_floating_point or dtype.is_complex):
        tol = tol.loosened(override.rtol, override.atol)
    return tol


def from_device(ctx: Context, actual: Any, expected: Any) -> tuple[Any, str | None]:
    """The device's outputs moved to the CPU inside the device scope (the comparison after it is
    CPU work, outside the scope), or why they cannot be compared: an output left on the CPU."""
    fa, fe = _leaves(actual), _leaves(expected)
    for i, (a, e) in enumerate(zip(fa, fe)):
        if (
            ctx.device_type != "cpu"
            and isinstance(a, torch.Tensor)
            and isinstance(e, torch.Tensor)
            and a.device.type == "cpu"
            and e.device.type == "cpu"
        ):
            return None, f"output {i}: left on cpu, expected on {ctx.device_type}"
    with ctx.adapter.device_scope():
        return tree_map_only(torch.Tensor, lambda t: t.detach().to("cpu"), actual), None


def compare(
    actual: Any, expected: Any, mode: str, ops_run: list[str], override: Any
) -> tuple[str | None, float | None]:
    """None when actual (from the device, on the CPU now: from_device) matches expected (CPU);
    else what differs."""
    fa, fe = _leaves(actual), _leaves(expected)
    if len(fa) != len(fe):
        return f"{len(fa)} outputs, expected {len(fe)}", None
    worst: float | None = None
    for i, (a, e) in enumerate(zip(fa, fe)):
        if not isinstance(e, torch.Tensor):
            if isinstance(a, torch.Tensor) or not _same_scalar(a, e):
                return f"output {i}: {a!r} != {e!r}"[:300], worst
            continue
        if not isinstance(a, torch.Tensor):
            return f"output {i}: {type(a).__name__}, expected a tensor", worst
        a, e = _plain(a), _plain(e)
        if tuple(a.shape) != tuple(e.shape) or a.dtype != e.dtype:
            return f"output {i}: {list(a.shape)} {a.dtype}, expected {list(e.shape)} {e.dtype}", worst
        if e.numel() == 0:
            continue
        tol = _tolerance(e.dtype, mode, ops_run, override)
        ok, err = _close(*_comparable(a, e), tol)
        if err is not None:
            worst = err if worst is None else max(worst, err)
        if not ok:
            return (
                f"output {i}: max_abs_err {err:.3g} beyond rtol={tol.rtol:g} atol={tol.atol:g} "
                f"atol_rms={tol.atol_rms:g}"
            ), worst
    return None, worst


# -------------------------------------------------------------------------------------- one case


@dataclass
class _Run:
    """What the forward stage leaves for the backward stage."""

    cpu_sample: Any = None
    cpu_out: Any = None
    dev_sample: Any = None
    dev_out: Any = None
    grad_ok: bool = True  # False: the reference cannot run with requires_grad inputs
    grad_problem: str = ""


def _stage(stage: str, status: Status, t0: float, **kw: Any) -> StageResult:
    return StageResult(stage=stage, status=status, seconds=time.perf_counter() - t0, **kw)


def _skip_rows(reason: UpstreamSkip, message: str, backward: bool = True) -> list[StageResult]:
    rows = [StageResult("forward", Status.SKIPPED, reason=reason.value, message=message[:300])]
    rows.append(
        StageResult("backward", Status.SKIPPED, reason=reason.value, message=message[:300])
        if backward
        else StageResult(
            "backward",
            Status.SKIPPED,
            reason=UpstreamSkip.PYTORCH_APPLICABILITY.value,
            message="op_db does not check gradients of this op and dtype",
        )
    )
    return rows


def forward(
    op: Any,
    dtype: torch.dtype,
    sample: Any,
    seed: int,
    ctx: Context,
    run: _Run,
    override: Any,
    events: list[dict[str, Any]],
    keep: frozenset[int] = frozenset(),
) -> StageResult:
    t0 = time.perf_counter()
    wants_grad = opinfos.wants_backward(op, dtype)
    # the determinism check repeats the reference exactly as it ran: with or without inputs that
    # require grad (matmul folds its batch dimensions only without, which changes the last bits)
    clone, mode = _clone, torch.enable_grad
    try:
        try:
            run.cpu_sample = _map_sample(sample, clone, None)
            with mode():
                run.cpu_out = _call(op, run.cpu_sample, seed)
        except Exception as exc:
            if not wants_grad:
                raise
            run.grad_ok, run.grad_problem = (
                False,
                f"cpu reference raised with inputs that require grad: {type(exc).__name__}: {_short(exc)}",
            )
            clone, mode = _no_grad_clone, torch.no_grad
            run.cpu_sample = _map_sample(sample, clone, None)
            with mode():
                run.cpu_out = _call(op, run.cpu_sample, seed)
        with mode():
            again = _call(op, _map_sample(sample, clone, None), seed)
    except Exception as exc:  # the reference itself cannot run this sample
        raise _Skip(
            UpstreamSkip.REFERENCE_ERROR, f"cpu reference raised {type(exc).__name__}: {_short(exc)}"
        ) from exc
    if not _same(run.cpu_out, again):
        raise _Skip(
            UpstreamSkip.REFERENCE_ERROR,
            "cpu reference is not deterministic: two runs with the same seed differ (eager_two_runs_differ)",
        )
    del again
    grad_mode = torch.enable_grad() if (wants_grad and run.grad_ok) else torch.no_grad()
    use_grad = wants_grad and run.grad_ok
    try:  # the device's part runs in its scope; the CPU reference above ran outside it
        with ctx.adapter.device_scope():
            run.dev_sample = _map_sample(
                sample,
                lambda t: t.detach().to(ctx.device, copy=True).requires_grad_(t.requires_grad and use_grad),
                ctx.device,
                keep,
            )
    except Exception as exc:
        feature = declared_unsupported(exc)
        if feature:
            raise _Skip(UpstreamSkip.BACKEND_UNSUPPORTED, f"{feature}: {_short(exc)}") from exc
        return _stage(
            "forward",
            Status.ERROR,
            t0,
            reason="inputs could not be moved to the device",
            error_class=type(exc).__name__,
            message=_short(exc),
            failing_op="aten._to_copy.default",
        )
    if not _names_device(run.dev_sample, ctx.device_type):
        raise _Skip(
            UpstreamSkip.PYTORCH_APPLICABILITY,
            "op_db's sample names no device (a factory call without "
            "device=): nothing of it runs on the device",
        )
    try:
        with ctx.adapter.device_scope(), ctx.adapter.track_fallbacks() as fell, ctx.watch_ops() as watch:
            with grad_mode:
                run.dev_out = _call(op, run.dev_sample, seed, ctx.device_type)
    except Exception as exc:  # the backend failing the op is the finding
        feature = declared_unsupported(exc)
        if feature:
            raise _Skip(UpstreamSkip.BACKEND_UNSUPPORTED, f"{feature}: {_short(exc)}") from exc
        return _stage(
            "forward",
            Status.ERROR,
            t0,
            reason="op raised on the backend",
            error_class=type(exc).__name__,
            message=_short(exc),
            failing_op=opinfos.full_name(op),
        )
    events.extend(fell)
    moved, left = from_device(ctx, run.dev_out, run.cpu_out)
    problem, err = (left, None) if left else compare(moved, run.cpu_out, ctx.mode, _seen(watch), override)
    return _judged("forward", t0, op, problem, err, fell, ctx)


def _judged(
    stage: str,
    t0: float,
    op: Any,
    problem: str | None,
    err: float | None,
    fell: list[dict[str, Any]],
    ctx: Context,
) -> StageResult:
    """A stage that ran: fail on a mismatch, else no-native-lowering if an op fell back, else pass
    (a backend that cannot report fallbacks passes; its rows say fallback_count null)."""
    reported = ctx.adapter.reports_fallbacks
    metrics = {
        "fallback_ops": fallback_ops(fell),
        "fallback_count": fallback_count(fell) if reported else None,
        "max_abs_err": err,
    }
    if problem:
        return _stage(
            stage,
            Status.FAIL,
            t0,
            reason=f"mismatch: {problem}",
            failing_op=opinfos.full_name(op),
            metrics=metrics,
        )
    if fell:
        return _stage(
            stage,
            Status.SKIPPED,
            t0,
            reason=UpstreamSkip.NO_NATIVE_LOWERING.value,
            message=f"matched the CPU through a CPU fallback of {', '.join(metrics['fallback_ops'])}"[:300],
            metrics=metrics,
        )
    return _stage(stage, Status.PASS, t0, metrics=metrics)


def _grad_inputs(sample: Any) -> list[torch.Tensor]:
    return [
        t
        for t in _leaves([sample.input, list(sample.args), dict(sample.kwargs)])
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]


def _grad_outputs(out: Any) -> list[torch.Tensor]:
    return [
        t
        for t in _leaves(out)
        if isinstance(t, torch.Tensor)
        and t.requires_grad
        and (t.dtype.is_floating_point or t.dtype.is_complex)
    ]


def backward(
    op: Any,
    dtype: torch.dtype,
    seed: int,
    ctx: Context,
    run: _Run,
    override: Any,
    events: list[dict[str, Any]],
) -> StageResult:
    t0 = time.perf_counter()
    if not run.grad_ok:
        return _stage(
            "backward",
            Status.SKIPPED,
            t0,
            reason=UpstreamSkip.REFERENCE_ERROR.value,
            message=run.grad_problem[:300],
        )
    inputs, outputs = _grad_inputs(run.cpu_sample), _grad_outputs(run.cpu_out)
    if not inputs or not outputs:
        what = "no input of the sample requires grad" if not inputs else "no differentiable output"
        return _stage(
            "backward",
            Status.SKIPPED,
            t0,
            reason=UpstreamSkip.PYTORCH_APPLICABILITY.value,
            message=f"op_db sample: {what}",
        )
    gen = torch.Generator().manual_seed(seed)
    grads_out = [
        torch.randn(o.shape, generator=gen, dtype=o.dtype)
        if o.dtype.is_floating_point or o.dtype.is_complex
        else torch.ones_like(o)
        for o in outputs
    ]
    try:
        expected = torch.autograd.grad(outputs, inputs, grads_out, allow_unused=True)
    except Exception as exc:  # noqa: BLE001
        return _stage(
            "backward",
            Status.SKIPPED,
            t0,
            reason=UpstreamSkip.REFERENCE_ERROR.value,
            message=f"cpu backward raised {type(exc).__name__}: {_short(exc)}",
        )
    dev_inputs, dev_outputs = _grad_inputs(run.dev_sample), _grad_outputs(run.dev_out)
    if len(dev_inputs) != len(inputs) or len(dev_outputs) != len(outputs):
        return _stage(
            "backward",
            Status.FAIL,
            t0,
            reason=f"mismatch: {len(dev_outputs)} differentiable outputs "
            f"on the device, {len(outputs)} on cpu",
            failing_op=opinfos.full_name(op),
        )
    try:
        with ctx.adapter.device_scope():
            dev_grads_out = [g.to(ctx.device) for g in grads_out]
            with ctx.adapter.track_fallbacks() as fell, ctx.watch_ops() as watch:
                actual = torch.autograd.grad(dev_outputs, dev_inputs, dev_grads_out, allow_unused=True)
    except Exception as exc:  # noqa: BLE001
        feature = declared_unsupported(exc)
        if feature:
            return _stage(
                "backward",
                Status.SKIPPED,
                t0,
                reason=UpstreamSkip.BACKEND_UNSUPPORTED.value,
                message=f"{feature}: {_short(exc)}",
            )
        return _stage(
            "backward",
            Status.ERROR,
            t0,
            reason="backward raised on the backend",
            error_class=type(exc).__name__,
            message=_short(exc),
            failing_op=opinfos.full_name(op),
        )
    events.extend(fell)
    for i, (a, e) in enumerate(zip(actual, expected)):
        if (a is None) != (e is None):
            return _stage(
                "backward",
                Status.FAIL,
                t0,
                failing_op=opinfos.full_name(op),
                reason=f"mismatch: gradient {i} is {'missing' if a is None else 'present'} on the "
                f"device, {'present' if e is not None else 'missing'} on cpu",
            )
    pairs = [(a, e) for a, e in zip(actual, expected) if e is not None]
    moved, left = from_device(ctx, [a for a, _ in pairs], [e for _, e in pairs])
    problem, err = (
        (left, None) if left else compare(moved, [e for _, e in pairs], ctx.mode, _seen(watch), override)
    )
    return _judged("backward", t0, op, problem, err, fell, ctx)


def listed_sample(samples: list[Any], index: int, shape_hash: str | None) -> int | None:
    """Where the listed sample is in this process's samples, or None when it is not (never another).

    Some generators yield their samples in an order that depends on the process's string-hash seed
    (op_db's meshgrid iterates over the set {'xy', 'ij'}), so the listing process and a worker can
    number the same samples differently. The listed index is used when its fingerprint matches;
    otherwise the one sample with the listed fingerprint, if exactly one has it."""
    if index < len(samples) and opinfos.fingerprint(samples[index]) == shape_hash:
        return index
    found = [i for i, s in enumerate(samples) if opinfos.fingerprint(s) == shape_hash]
    return found[0] if len(found) == 1 else None


def run_case(payload: dict[str, Any], ctx: Context) -> tuple[list[StageResult], list[dict[str, Any]]]:
    """The two stage rows of one case and the fallback events seen while running it.

    payload: ``{"info": {"op", "variant", "dtype", "sample", "family"}, "hash": shape hash}``
    (registry.upstream.listing.to_cases), or a group the listing already judged (``"listing"``)."""
    events: list[dict[str, Any]] = []
    listed = payload.get("listing")
    if listed:  # the listing already knows: no CPU dtype here, or the sample generator raised
        return _skip_rows(UpstreamSkip(listed["reason"]), listed["message"]), events
    info = payload["info"]
    op = opinfos.find(info["op"], info.get("variant", ""))
    dtype = opinfos.parse_dtype(info["dtype"])
    wants_grad = opinfos.wants_backward(op, dtype)
    why = opinfos.applicability_skip(op, dtype, ctx.device_type)
    if why:
        return _skip_rows(UpstreamSkip.PYTORCH_APPLICABILITY, why, wants_grad), events
    try:
        samples = ctx.samples_of(op, dtype)
    except Exception as exc:  # noqa: BLE001
        return _skip_rows(
            UpstreamSkip.REFERENCE_ERROR,
            f"sample generation raised {type(exc).__name__}: {_short(exc)}",
            wants_grad,
        ), events
    index = int(info["sample"])
    at = listed_sample(samples, index, payload.get("hash"))
    if at is None:
        return _skip_rows(
            UpstreamSkip.REFERENCE_ERROR,
            "op_db's sample generator is not reproducible: the sample differs from the one listed",
            wants_grad,
        ), events
    seed = opinfos.seed_of(info["op"], info.get("variant", ""), info["dtype"], index)
    override = opinfos.tolerance_override(op, dtype, ctx.device_type)
    run = _Run()
    try:
        fwd = forward(
            op,
            dtype,
            samples[at],
            seed,
            ctx,
            run,
            override,
            events,
            ctx.pinned_of(op, dtype, at) if ctx.device_type != "cpu" else frozenset(),
        )
    except _Skip as skip:
        return _skip_rows(skip.reason, skip.message, wants_grad), events
    if not wants_grad:
        bwd = StageResult(
            "backward",
            Status.SKIPPED,
            reason=UpstreamSkip.PYTORCH_APPLICABILITY.value,
            message="op_db does not check gradients of this op and dtype",
        )
    elif fwd.status in (Status.ERROR,):
        bwd = StageResult("backward", Status.NOT_ATTEMPTED, reason="forward raised on the backend")
    else:
        bwd = backward(op, dtype, seed, ctx, run, override, events)
    return [fwd, bwd], events


def quiet() -> None:
    """One intra-op thread and no warnings: op_db samples warn a lot, and workers share the cores."""
    warnings.simplefilter("ignore")
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
