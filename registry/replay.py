"""Replay one registry case: build inputs that respect its constraints, run the op on the backend
and on the CPU reference, compare with per-dtype tolerances, and say whether it ran natively.

`replay(case, adapter)` never raises for a problem of the op or the backend: it returns a
`StageResult` (stage ``op``) with pass / fail / error, or skipped with the reason when the case
cannot be replayed (an argument that cannot be rebuilt, the CPU reference itself failing) or has
no reference (PyTorch's CPU has no kernel for the call as recorded: ``no cpu reference: ...``).

    spec = CaseSpec.from_entry(entry)
    result = replay(spec, get_backend("neuron"))
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from contracts.backends import fallback_ops
from contracts.records import StageResult
from contracts.status import Status
from contracts.timing import phase
from contracts.tolerance import Tolerance
from registry import boundaries, scaling
from registry.constraints import (
    infer_constraints,
    is_metadata_only,
    metadata_only_outputs,
    unreplayable_reason,
)
from registry.encoding import DTYPE_ABBREVS, find_opaque, parse_signature, run_of, signature_hash
from registry.errors import NoCpuKernelError, TooLargeError, UnreplayableError
from registry.inputs import BuiltTensor, build_args, build_tensor, materialize  # noqa: F401  (re-exported)
from registry.tolerances import tolerance_for


@dataclass
class CaseSpec:
    """What a unit case needs: JSON-able, so it travels as a `contracts.records.Case` payload."""

    op: str
    signature: str
    constraints: dict[str, dict] = field(default_factory=dict)
    case_id: str = ""

    @classmethod
    def from_entry(cls, entry: Any) -> CaseSpec:
        return cls(entry.op, entry.signature, dict(entry.constraints), entry.case_id)

    @classmethod
    def from_payload(cls, payload: dict) -> CaseSpec:
        return cls(
            payload["op"],
            payload["signature"],
            dict(payload.get("constraints") or {}),
            payload.get("case_id", ""),
        )

    def to_payload(self) -> dict:
        return {
            "op": self.op,
            "signature": self.signature,
            "constraints": self.constraints,
            "case_id": self.case_id,
        }


def resolve_op(op: str) -> torch._ops.OpOverload:
    """``aten.addmm.default`` -> torch.ops.aten.addmm.default (UnreplayableError if unknown)."""
    parts = op.split(".")
    if len(parts) != 3:
        raise UnreplayableError(f"not an op overload name: {op!r}")
    ns, packet, overload = parts
    try:
        return getattr(getattr(getattr(torch.ops, ns), packet), overload)
    except (AttributeError, RuntimeError) as exc:
        raise UnreplayableError(f"op {op} does not exist in torch {torch.__version__}") from exc


# -- comparison -----------------------------------------------------------------------------------


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [y for x in value for y in _flatten(x)]
    return [value]


def _mutated(func: torch._ops.OpOverload, args: list, kwargs: dict) -> list[Any]:
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            out.extend(x for x in _flatten(value) if isinstance(x, torch.Tensor))
    return out


@dataclass
class OpComparison:
    """An op call's outputs on the device against the CPU's, by registry/data/tolerances.yaml.
    Not harness.stages.compare.TensorComparison (a model's tensors against a float64 truth)."""

    ok: bool
    reason: str = ""
    max_abs_err: float | None = None


def compare(op: str, expected: list[Any], actual: list[Any], mode: str, upcast: bool = False) -> OpComparison:
    if len(expected) != len(actual):
        return OpComparison(False, f"{len(actual)} outputs, expected {len(expected)}")
    worst: float | None = None
    meta_only = is_metadata_only(op)
    meta_outputs = metadata_only_outputs(op)
    for i, (e, a) in enumerate(zip(expected, actual)):
        if not isinstance(e, torch.Tensor):
            if isinstance(a, torch.Tensor) or not _same_scalar(e, a):
                return OpComparison(False, f"output {i}: {a!r} != {e!r}")
            continue
        if not isinstance(a, torch.Tensor):
            return OpComparison(False, f"output {i}: {type(a).__name__}, expected a tensor")
        if upcast and e.dtype == torch.float32 and a.dtype in (torch.float16, torch.bfloat16):
            e = e.to(a.dtype)
        if tuple(a.shape) != tuple(e.shape) or a.dtype != e.dtype:
            return OpComparison(
                False, f"output {i}: {list(a.shape)} {a.dtype}, expected {list(e.shape)} {e.dtype}"
            )
        if meta_only or i in meta_outputs or e.numel() == 0:
            continue
        a = a.detach().to("cpu")
        tol = tolerance_for(op, DTYPE_ABBREVS.get(e.dtype, ""), mode)
        ok, err = _close(a, e.detach(), tol)
        if err is not None:
            worst = err if worst is None else max(worst, err)
        if not ok:
            return OpComparison(
                False,
                f"output {i}: max_abs_err {err:.3g} beyond rtol={tol.rtol:g} atol={tol.atol:g} "
                f"atol_rms={tol.atol_rms:g}",
                worst,
            )
    return OpComparison(True, "", worst)


def _same_scalar(e: Any, a: Any) -> bool:
    try:
        return bool(e == a) or (e != e and a != a)
    except Exception:  # noqa: BLE001 - an object without equality (a script object): compare types
        return type(e) is type(a)


def _close(a: torch.Tensor, e: torch.Tensor, tol: Tolerance) -> tuple[bool, float | None]:
    if tol.exact or not (e.dtype.is_floating_point or e.dtype.is_complex):
        ok = torch.equal(a, e)
        if ok:
            return True, 0.0
        diff = (
            (a.to(torch.float64) - e.to(torch.float64)).abs() if e.dtype != torch.bool else (a != e).double()
        )
        return False, float(diff.max())
    if torch.equal(a, e):
        return True, 0.0
    if e.dtype.is_complex:
        a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
    a64, e64 = a.to(torch.float64), e.to(torch.float64)
    same_nan = torch.isnan(a64) & torch.isnan(e64)
    same_inf = torch.isinf(e64) & (a64 == e64)
    diff = (a64 - e64).abs()
    diff = torch.where(same_nan | same_inf, torch.zeros_like(diff), diff)
    finite = torch.isfinite(e64)
    rms = float(e64[finite].pow(2).mean().sqrt()) if bool(finite.any()) else 0.0
    allowed = tol.atol + tol.atol_rms * rms + tol.rtol * torch.where(finite, e64.abs(), torch.zeros_like(e64))
    bad = ~(diff <= allowed) & ~(same_nan | same_inf)
    err = float(torch.nan_to_num(diff, nan=float("inf")).max())
    return (not bool(bad.any())), err


def _upcast(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
        return value.float()
    if isinstance(value, list):
        return [_upcast(x) for x in value]
    return value


@dataclass
class OpReference:
    """The CPU's outputs (plus mutated args) of one op call. `rejected` is the error of the call as
    recorded when the CPU kernel refused it and the outputs come from an f32 upcast of its 16-bit
    inputs. Not harness.stages.reference.StepReference (a model's training step on the CPU)."""

    outputs: list[Any] | None
    rejected: str = ""


#: How the reason of a case without a CPU reference begins (blamed `upstream` by
#: harness/data/blame_rules.yaml): PyTorch's CPU cannot compute the call as recorded.
NO_CPU_REFERENCE = "no cpu reference"


def _no_cpu_kernel(exc: BaseException) -> NoCpuKernelError:
    return NoCpuKernelError(
        f"{NO_CPU_REFERENCE}: PyTorch's CPU kernel does not implement the call as recorded "
        f"({type(exc).__name__}: {_normalize(exc)})"
    )


@phase("reference")  # the nightly's time shares (contracts.timing)
def _reference(func: Any, args: list, kwargs: dict) -> OpReference:
    """Mixed 16/32-bit calls that CUDA accepts and the CPU kernel rejects (layer-norm backward with
    f16 input and f32 stats, recorded under autocast) get an f32-upcast reference, which `compare`
    casts to the backend's 16-bit output dtype; `outputs` is None when even that fails.
    NoCpuKernelError when the CPU has no kernel for the call (and none for its upcast)."""
    with torch.no_grad():
        try:
            out = func(*args, **kwargs)
            return OpReference(_flatten(out) + _mutated(func, args, kwargs))
        except Exception as exc:  # noqa: BLE001 - judged below
            recorded = exc
        if not any(
            isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)
            for t in _flatten([args, list(kwargs.values())])
        ):
            if isinstance(recorded, NotImplementedError):
                raise _no_cpu_kernel(recorded) from recorded
            raise recorded
        rejected = f"{type(recorded).__name__}: {_normalize(recorded)}"
        up_args, up_kwargs = _upcast(args), {k: _upcast(v) for k, v in kwargs.items()}
        try:
            out = _flatten(func(*up_args, **up_kwargs)) + _mutated(func, up_args, up_kwargs)
        except Exception:  # noqa: BLE001
            if isinstance(recorded, NotImplementedError):
                raise _no_cpu_kernel(recorded) from recorded
            return OpReference(None, rejected)
        return OpReference(out, rejected)


# -- replay ---------------------------------------------------------------------------------------

_ADDR = re.compile(r"0x[0-9a-fA-F]+")


def _normalize(msg: str) -> str:
    first = str(msg).strip().splitlines()[0] if str(msg).strip() else ""
    return _ADDR.sub("0x?", first)[:300]


def _seed(spec: CaseSpec) -> int:
    return int(signature_hash(spec.op, spec.signature)[:8], 16)


@dataclass
class Plan:
    """How a case is replayed, decided once for import and run alike: the (possibly scaled) call,
    its boundary variants, the base variant's inputs and CPU reference. `skip` says why the case
    cannot be replayed (then nothing else is set)."""

    skip: str = ""
    func: Any = None
    a_enc: list = field(default_factory=list)
    k_enc: dict = field(default_factory=dict)
    factor: int = 1
    variants: list = field(default_factory=list)  # [(name, constraints)], the base variant first
    built: tuple = ()
    expected: OpReference | None = None


def plan(spec: CaseSpec, max_numel: int | None = None) -> Plan:
    """Decide how to replay `spec` within the shape budget (never raises)."""
    try:
        reason = unreplayable_reason(spec.op)
        if reason:
            raise UnreplayableError(reason)
        func = resolve_op(spec.op)
        a_enc, k_enc = parse_signature(spec.signature)
        opaque = find_opaque([a_enc, list(k_enc.values())])
        if opaque:
            raise UnreplayableError(f"argument of type {opaque} cannot be rebuilt")
        # the op's semantics as known now override what was stored when the case was recorded,
        # except a repro's concrete values (the values the failing call was given)
        constraints = {**spec.constraints, **infer_constraints(spec.op, a_enc, k_enc)}
        constraints.update({p: c for p, c in spec.constraints.items() if c.get("kind") == "values"})
        fitted = scaling.fit(func, a_enc, k_enc, constraints, max_numel)
    except (UnreplayableError, TooLargeError) as exc:
        return Plan(skip=f"unreplayable: {exc}")
    except Exception as exc:  # noqa: BLE001 - a malformed case is reported, not raised
        return Plan(skip=f"unreplayable: cannot build inputs ({type(exc).__name__}: {_normalize(exc)})")
    # A scaled call that the CPU rejects (meta kernels check less than CPU kernels) is retried at
    # full size when that is within the hard cap.
    attempts = [fitted]
    if fitted[3] != 1 and scaling.max_numel(a_enc, k_enc) <= scaling.hard_cap(max_numel):
        attempts.append((a_enc, k_enc, constraints, 1))
    for n, (fa, fk, fc, factor) in enumerate(attempts):
        if factor != 1:  # a count another input's shape fixes follows the scaled shapes
            fc = {**fc, **{p: c for p, c in infer_constraints(spec.op, fa, fk).items() if "count_of" in c}}
        variants = boundaries.variants(fa, fk, fc)
        try:
            built = build_args(fa, fk, variants[0][1], torch.Generator().manual_seed(_seed(spec)))
            expected = _reference(func, materialize(built[0], _CPU), materialize(built[1], _CPU))
        except NoCpuKernelError as exc:  # at any scale: the kernel is missing for the dtypes, not the sizes
            return Plan(skip=str(exc))
        except Exception as exc:  # noqa: BLE001 - the case itself is invalid on the reference
            if n == len(attempts) - 1:
                return Plan(skip=f"cpu reference raised {type(exc).__name__}: {_normalize(exc)}")
            continue
        if expected.outputs is None:
            return Plan(skip="cpu reference raised even with 16-bit inputs upcast to f32")
        return Plan("", func, fa, fk, factor, variants, built, expected)
    raise AssertionError("unreachable")  # pragma: no cover


def replay(spec: CaseSpec, adapter: Any, mode: str = "exact", max_numel: int | None = None) -> StageResult:
    """Run one case on `adapter`'s device and on CPU; a StageResult, never an exception."""
    t0 = time.perf_counter()
    metrics: dict[str, Any] = {"native": None, "fallback_ops": [], "max_abs_err": None}

    def result(status: Status, **kw: Any) -> StageResult:
        return StageResult(
            stage="op",
            status=status,
            failing_op=kw.pop("failing_op", ""),
            seconds=time.perf_counter() - t0,
            metrics=metrics,
            **kw,
        )

    p = plan(spec, max_numel)
    if p.skip:
        return result(Status.SKIPPED, reason=p.skip)
    if run_of(spec.signature) and getattr(adapter, "compile_backend", None) is None:
        return result(Status.SKIPPED, reason="unreplayable: a compiled case, and the backend has no compiler")
    if p.factor != 1:
        metrics["scaled_by"] = p.factor
    skipped: list[str] = []
    built, expected = p.built, p.expected
    rounded = declared_rounding(adapter, spec.op)
    if rounded:  # the reference computes as the device declares: judged with the dtype's own tolerance
        try:
            expected = _reference(
                p.func,
                *round_declared(p.func, materialize(built[0], _CPU), materialize(built[1], _CPU), rounded),
            )
        except Exception:  # noqa: BLE001 - the rounded call is invalid: the mode's looser tolerance applies
            rounded = ()
        if rounded and expected.outputs is None:
            rounded, expected = (), p.expected
        elif rounded:
            metrics["reference"] = "device-rounding"
            mode = "exact"
    for i, (name, vc) in enumerate(p.variants):
        if i:  # the boundary variants: same seed, other values for one input
            try:
                built = build_args(p.a_enc, p.k_enc, vc, torch.Generator().manual_seed(_seed(spec)))
                cpu_args, cpu_kwargs = materialize(built[0], _CPU), materialize(built[1], _CPU)
                if rounded:
                    cpu_args, cpu_kwargs = round_declared(p.func, cpu_args, cpu_kwargs, rounded)
                expected = _reference(p.func, cpu_args, cpu_kwargs)
            except Exception:  # noqa: BLE001 - invalid on the reference (e.g. a mask count the op needs)
                expected = OpReference(None)
            if expected.outputs is None:
                skipped.append(name)
                continue
        bad = _run_on_device(spec, p.func, built, expected, adapter, mode, metrics)
        if bad is not None:
            status, kw = bad
            if i:
                kw["reason"] = f"{kw['reason']} (boundary variant {name})"
            return result(status, **kw)
    metrics["variants"] = len(p.variants) - len(skipped)
    if skipped:
        metrics["variants_skipped"] = skipped
    return result(Status.PASS)


_CPU = torch.device("cpu")


def declared_rounding(adapter: Any, op: str) -> tuple[str, ...]:
    """The arguments of `op` the device declares it rounds to bfloat16 in its precision mode
    (`rounded_inputs()`: op packet -> argument names; the packet is the op without its overload).
    Then the reference rounds the same arguments, as the model tiers' numerics reference does, and
    a 1% error of a matmul no longer hides under bf16-level tolerances. Empty for a device that
    computes as the dtypes say, or that predates the declaration (its mode loosens the tolerance)."""
    try:
        table = dict(adapter.rounded_inputs() or {})
    except Exception:  # noqa: BLE001 - a broken declaration: the tolerance of the mode applies
        return ()
    return tuple(table.get(op.rsplit(".", 1)[0] if op.count(".") >= 2 else op, ()))


def _round_bf16(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:  # the declaration: float32 arguments
        return value.to(torch.bfloat16).to(value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_round_bf16(v) for v in value)
    return value


def round_declared(func: Any, args: list, kwargs: dict, names: tuple[str, ...]) -> tuple[list, dict]:
    """`args`/`kwargs` with the schema arguments named in `names` rounded to bfloat16 (kept in their
    dtype)."""
    args, kwargs = list(args), dict(kwargs)
    for i, arg in enumerate(func._schema.arguments):
        if arg.name not in names:
            continue
        if i < len(args) and not arg.kwarg_only:
            args[i] = _round_bf16(args[i])
        elif arg.name in kwargs:
            kwargs[arg.name] = _round_bf16(kwargs[arg.name])
    return args, kwargs


def _run_on_device(
    spec: CaseSpec,
    func: Any,
    built: tuple,
    expected: OpReference,
    adapter: Any,
    mode: str,
    metrics: dict[str, Any],
) -> tuple[Status, dict[str, Any]] | None:
    """Run one built variant on the device and compare; None when it passes, else (status, fields)."""
    if expected.rejected:
        metrics["reference"] = "f32-upcast"
    try:  # the device's part runs in its scope; the plan and the CPU reference ran outside it
        with adapter.device_scope():
            dev_args, dev_kwargs = (
                materialize(built[0], adapter.device),
                materialize(built[1], adapter.device),
            )
    except Exception as exc:  # noqa: BLE001 - moving inputs is already backend work
        return Status.ERROR, dict(
            reason="inputs could not be moved to the device",
            error_class=type(exc).__name__,
            message=_normalize(exc),
            failing_op="aten._to_copy.default",
        )
    try:
        call = func if not run_of(spec.signature) else compiled_call(func, adapter.compile_backend)
        with adapter.device_scope():
            with adapter.track_fallbacks() as events, torch.no_grad():
                actual_out = call(*dev_args, **dev_kwargs)
            actual = _flatten(actual_out) + _mutated(func, dev_args, dev_kwargs)
            actual = [x.to("cpu") if isinstance(x, torch.Tensor) else x for x in actual]
    except Exception as exc:  # noqa: BLE001 - the backend failing the op is the finding
        raised = f"{type(exc).__name__}: {_normalize(exc)}"
        if expected.rejected and _same_error(raised, expected.rejected):
            # the CPU kernel refuses the call as recorded (mixed 16/32-bit, recorded under autocast)
            # exactly so: not the backend's failure, and there is no as-recorded reference
            return Status.SKIPPED, dict(
                reason=f"{NO_CPU_REFERENCE}: the CPU kernel rejects the call as recorded "
                f"and the backend raises the same ({expected.rejected[:160]})"
            )
        return Status.ERROR, dict(
            error_class=type(exc).__name__,
            message=_normalize(exc),
            failing_op=spec.op,
            reason="op raised on the backend",
        )
    ops = fallback_ops(events)
    metrics["fallback_ops"] = sorted(set(metrics.get("fallback_ops") or []) | set(ops))
    if adapter.device_type == "cpu":
        metrics["native"] = True
    elif adapter.reports_fallbacks:
        metrics["native"] = bool(metrics.get("native", True) is not False and not events)
    cmp = compare(spec.op, expected.outputs, actual, mode, upcast=bool(expected.rejected))
    if cmp.max_abs_err is not None:
        worst = metrics.get("max_abs_err")
        metrics["max_abs_err"] = cmp.max_abs_err if worst is None else max(worst, cmp.max_abs_err)
    if not cmp.ok:
        return Status.FAIL, dict(reason=f"mismatch: {cmp.reason}", failing_op=spec.op)
    return None


def compiled_call(func: Any, backend: Any) -> Any:
    """`func` through the backend's compiler (a case whose signature says `run: compiled`: a root
    cause found in compiled execution), as `torch.compile` runs it; Dynamo's caches are reset
    first, so the compile is this call's own."""
    import torch._dynamo

    torch._dynamo.reset()

    def call(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return torch.compile(call, backend=backend, fullgraph=True, dynamic=False)


def _same_error(a: str, b: str) -> bool:
    """The same error class and message once device names are set aside (neuron vs cpu)."""

    def norm(text: str) -> str:
        return re.sub(r"\b(cpu|neuron|privateuseone|cuda)\b", "DEV", text.lower())

    return norm(a) == norm(b)
