"""Replay one registry case: build inputs that respect its constraints, run the op on the backend
and on the CPU reference, compare with per-dtype tolerances, and say whether it ran natively.

`replay(case, adapter)` never raises for a problem of the op or the backend: it returns a
`StageResult` (stage ``op``) with pass / fail / error, or skipped with the reason when the case
cannot be replayed (an argument that cannot be rebuilt, the CPU reference itself failing).

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
from registry import scaling
from registry.constraints import infer_constraints, is_metadata_only, unreplayable_reason
from registry.encoding import ABBREV_DTYPES, DTYPE_ABBREVS, UnreplayableError, decode_scalar, find_opaque, parse_signature, signature_hash
from registry.tolerances import Tolerance, tolerance_for


@dataclass
class CaseSpec:
    """What a unit case needs: JSON-able, so it travels as a `contracts.records.Case` payload."""

    op: str
    signature: str
    constraints: dict[str, dict] = field(default_factory=dict)
    case_id: str = ""

    @classmethod
    def from_entry(cls, entry: Any) -> "CaseSpec":
        return cls(entry.op, entry.signature, dict(entry.constraints), entry.case_id)

    @classmethod
    def from_payload(cls, payload: dict) -> "CaseSpec":
        return cls(payload["op"], payload["signature"], dict(payload.get("constraints") or {}), payload.get("case_id", ""))

    def to_payload(self) -> dict:
        return {"op": self.op, "signature": self.signature, "constraints": self.constraints, "case_id": self.case_id}


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


# -- inputs ---------------------------------------------------------------------------------------

def _storage_size(shape: list[int], stride: list[int], offset: int) -> int:
    if any(s == 0 for s in shape):
        return offset
    return offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1


def _values(shape: list[int], dtype: torch.dtype, c: dict | None, gen: torch.Generator) -> torch.Tensor:
    """Values for a logical tensor of `shape` that satisfy constraint `c`."""
    kind = (c or {}).get("kind")
    n_shape = list(shape)
    if dtype == torch.bool:
        density = float((c or {}).get("density", 0.5))
        if c and c.get("source") == "observed":
            # as many Trues as the model had (recorded, or from the density for older recordings)
            numel = int(torch.Size(n_shape).numel())
            count = min(numel, int(c.get("count", round(density * numel))))
            flat = torch.zeros(numel, dtype=torch.bool)
            flat[torch.randperm(numel, generator=gen)[:count]] = True
            return flat.reshape(n_shape)
        return torch.rand(n_shape, generator=gen) < density
    if not (dtype.is_floating_point or dtype.is_complex):
        if kind == "offsets" and n_shape:
            high = int(c["high"])
            cuts = torch.randint(0, high + 1, n_shape, generator=gen).sort(dim=-1).values
            cuts[..., -1] = high
            return cuts.to(dtype)
        if kind in ("index", "range"):
            low, high = int(c.get("low", 0)), int(c.get("high", 1))
            high = max(high, low + 1)
            if c.get("unique") and n_shape:
                return _unique_index(n_shape, high, c.get("unique_dim"), gen).to(dtype)
            return torch.randint(low, high, n_shape, generator=gen).to(dtype)
        low = 1 if kind in ("nonzero", "positive") else 0
        hi = 2 if dtype == torch.uint8 and kind is None else 8
        return torch.randint(low, max(hi, low + 1), n_shape, generator=gen).to(dtype)
    if dtype.is_complex:
        return torch.randn(n_shape, generator=gen, dtype=torch.complex64).to(dtype)
    base = torch.randn(n_shape, generator=gen)
    if kind == "positive":
        base = torch.rand(n_shape, generator=gen) + 0.5
    elif kind == "unit_interval":
        base = torch.rand(n_shape, generator=gen) * 0.98 + 0.01
    elif kind == "nonzero":
        base = torch.where(base >= 0, base + 0.5, base - 0.5)
    elif kind == "sorted" and n_shape:
        base = base.sort(dim=-1).values
    return base.to(dtype)


def _unique_index(shape: list[int], high: int, dim: Any, gen: torch.Generator) -> torch.Tensor:
    """Indices without repeats along `dim` (or overall), when there are enough distinct values."""
    if isinstance(dim, int) and -len(shape) <= dim < len(shape):
        d = dim % len(shape)
        if shape[d] <= high:
            scores = torch.rand([*shape[:d], high, *shape[d + 1:]], generator=gen)
            return scores.argsort(dim=d).narrow(d, 0, shape[d])
    n = 1
    for s in shape:
        n *= s
    if n <= high:
        return torch.randperm(high, generator=gen)[:n].reshape(shape)
    return torch.randint(0, high, shape, generator=gen)


@dataclass
class BuiltTensor:
    cpu: torch.Tensor
    base: torch.Tensor | None  # the backing storage, when the layout is not plain contiguous
    shape: list[int]
    stride: list[int] | None
    offset: int

    def to(self, device: torch.device) -> torch.Tensor:
        """A fresh copy on `device` (a cross-device .to() already copies; on cpu, clone)."""
        copy = (lambda t: t.clone()) if device.type == "cpu" else (lambda t: t.to(device))
        if self.base is None:
            return copy(self.cpu)
        return copy(self.base).as_strided(self.shape, self.stride, self.offset)


def build_tensor(enc: dict, c: dict | None, gen: torch.Generator) -> BuiltTensor:
    dtype = ABBREV_DTYPES[enc["dt"]]
    shape = [int(s) for s in enc["T"]]
    stride, offset = enc.get("st"), int(enc.get("off", 0))
    if stride is None and offset == 0:
        return BuiltTensor(_values(shape, dtype, c, gen), None, shape, None, 0)
    stride = stride or _contiguous(shape)
    size = _storage_size(shape, stride, offset)
    base = _values([size], dtype, c, gen)
    return BuiltTensor(base.as_strided(shape, stride, offset), base, shape, stride, offset)


def _contiguous(shape: list[int]) -> list[int]:
    from registry.encoding import contiguous_strides

    return contiguous_strides(shape)


def build_args(a_enc: list, k_enc: dict, constraints: dict, gen: torch.Generator) -> tuple[Any, Any]:
    """Encoded args -> a structure with `BuiltTensor` leaves (device placement comes later)."""

    def walk(enc: Any, path: str) -> Any:
        if isinstance(enc, dict) and "T" in enc:
            return build_tensor(enc, constraints.get(path), gen)
        if isinstance(enc, list):
            return [walk(x, f"{path}.{i}") for i, x in enumerate(enc)]
        return ("scalar", enc)

    return [walk(x, f"a.{i}") for i, x in enumerate(a_enc)], {k: walk(v, f"k.{k}") for k, v in k_enc.items()}


def materialize(built: Any, device: torch.device) -> Any:
    if isinstance(built, BuiltTensor):
        return built.to(device)
    if isinstance(built, list):
        return [materialize(x, device) for x in built]
    if isinstance(built, dict):
        return {k: materialize(v, device) for k, v in built.items()}
    return decode_scalar(built[1], device)


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
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_err: float | None = None


def compare(op: str, expected: list[Any], actual: list[Any], mode: str, upcast: bool = False) -> Comparison:
    if len(expected) != len(actual):
        return Comparison(False, f"{len(actual)} outputs, expected {len(expected)}")
    worst: float | None = None
    meta_only = is_metadata_only(op)
    for i, (e, a) in enumerate(zip(expected, actual)):
        if not isinstance(e, torch.Tensor):
            if isinstance(a, torch.Tensor) or not _same_scalar(e, a):
                return Comparison(False, f"output {i}: {a!r} != {e!r}")
            continue
        if not isinstance(a, torch.Tensor):
            return Comparison(False, f"output {i}: {type(a).__name__}, expected a tensor")
        if upcast and e.dtype == torch.float32 and a.dtype in (torch.float16, torch.bfloat16):
            e = e.to(a.dtype)
        if tuple(a.shape) != tuple(e.shape) or a.dtype != e.dtype:
            return Comparison(False, f"output {i}: {list(a.shape)} {a.dtype}, expected {list(e.shape)} {e.dtype}")
        if meta_only or e.numel() == 0:
            continue
        a = a.detach().to("cpu")
        tol = tolerance_for(op, DTYPE_ABBREVS.get(e.dtype, ""), mode)
        ok, err = _close(a, e.detach(), tol)
        if err is not None:
            worst = err if worst is None else max(worst, err)
        if not ok:
            return Comparison(False, f"output {i}: max_abs_err {err:.3g} beyond rtol={tol.rtol:g} atol={tol.atol:g} atol_rms={tol.atol_rms:g}", worst)
    return Comparison(True, "", worst)


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
        diff = (a.to(torch.float64) - e.to(torch.float64)).abs() if e.dtype != torch.bool else (a != e).double()
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


@phase("reference")  # the nightly's time shares (contracts.timing)
def _reference(func: Any, args: list, kwargs: dict) -> Any:
    """CPU outputs (plus mutated args). Mixed 16/32-bit calls that CUDA accepts and the CPU kernel
    rejects (layer-norm backward with f16 input and f32 stats) get an f32-upcast reference, which
    `compare` casts to the backend's 16-bit output dtype: returned as a 1-tuple to say so."""
    with torch.no_grad():
        try:
            out = func(*args, **kwargs)
            return _flatten(out) + _mutated(func, args, kwargs)
        except Exception:  # noqa: BLE001
            if not any(isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)
                       for t in _flatten([args, list(kwargs.values())])):
                raise
        up_args, up_kwargs = _upcast(args), {k: _upcast(v) for k, v in kwargs.items()}
        try:
            out = _flatten(func(*up_args, **up_kwargs)) + _mutated(func, up_args, up_kwargs)
        except Exception:  # noqa: BLE001
            return None
        return (out,)


# -- replay ---------------------------------------------------------------------------------------

_ADDR = re.compile(r"0x[0-9a-fA-F]+")


def _normalize(msg: str) -> str:
    first = str(msg).strip().splitlines()[0] if str(msg).strip() else ""
    return _ADDR.sub("0x?", first)[:300]


def _seed(spec: CaseSpec) -> int:
    return int(signature_hash(spec.op, spec.signature)[:8], 16)


def replay(spec: CaseSpec, adapter: Any, mode: str = "exact", max_numel: int | None = None) -> StageResult:
    """Run one case on `adapter`'s device and on CPU; a StageResult, never an exception."""
    t0 = time.perf_counter()
    metrics: dict[str, Any] = {"native": None, "fallback_ops": [], "max_abs_err": None}

    def result(status: Status, **kw: Any) -> StageResult:
        return StageResult(stage="op", status=status, failing_op=kw.pop("failing_op", ""),
                           seconds=time.perf_counter() - t0, metrics=metrics, **kw)

    try:
        reason = unreplayable_reason(spec.op)
        if reason:
            raise UnreplayableError(reason)
        func = resolve_op(spec.op)
        a_enc, k_enc = parse_signature(spec.signature)
        opaque = find_opaque([a_enc, list(k_enc.values())])
        if opaque:
            raise UnreplayableError(f"argument of type {opaque} cannot be rebuilt")
        # the op's semantics as known now override what was stored when the case was recorded
        constraints = {**spec.constraints, **infer_constraints(spec.op, a_enc, k_enc)}
        fitted = scaling.fit(func, a_enc, k_enc, constraints, max_numel)
    except (UnreplayableError, scaling.TooLargeError) as exc:
        return result(Status.SKIPPED, reason=f"unreplayable: {exc}")
    except Exception as exc:  # noqa: BLE001 - a malformed case is reported, not raised
        return result(Status.SKIPPED, reason=f"unreplayable: cannot build inputs ({type(exc).__name__}: {_normalize(exc)})")

    # A scaled call that the CPU rejects (meta kernels check less than CPU kernels) is retried at
    # full size when that is within the hard cap.
    attempts = [fitted]
    if fitted[3] != 1 and scaling.max_numel(a_enc, k_enc) <= scaling.hard_cap(max_numel):
        attempts.append((a_enc, k_enc, constraints, 1))
    for n, (fa, fk, fc, factor) in enumerate(attempts):
        metrics.pop("scaled_by", None)
        if factor != 1:
            metrics["scaled_by"] = factor
        try:
            built_a, built_k = build_args(fa, fk, fc, torch.Generator().manual_seed(_seed(spec)))
            cpu_args, cpu_kwargs = materialize(built_a, torch.device("cpu")), materialize(built_k, torch.device("cpu"))
            expected = _reference(func, cpu_args, cpu_kwargs)
            break
        except Exception as exc:  # noqa: BLE001 - the case itself is invalid on the reference
            if n == len(attempts) - 1:
                return result(Status.SKIPPED, reason=f"cpu reference raised {type(exc).__name__}: {_normalize(exc)}")
    if expected is None:
        return result(Status.SKIPPED, reason="cpu reference raised even with 16-bit inputs upcast to f32")
    if isinstance(expected, tuple):
        expected, metrics["reference"] = expected[0], "f32-upcast"

    device = adapter.device
    try:
        dev_args, dev_kwargs = materialize(built_a, device), materialize(built_k, device)
    except Exception as exc:  # noqa: BLE001 - moving inputs is already backend work
        return result(Status.ERROR, reason="inputs could not be moved to the device", error_class=type(exc).__name__,
                      message=_normalize(exc), failing_op="aten._to_copy.default")

    try:
        with adapter.track_fallbacks() as events, torch.no_grad():
            actual_out = func(*dev_args, **dev_kwargs)
        actual = _flatten(actual_out) + _mutated(func, dev_args, dev_kwargs)
        actual = [x.to("cpu") if isinstance(x, torch.Tensor) else x for x in actual]
    except Exception as exc:  # noqa: BLE001 - the backend failing the op is the finding
        return result(Status.ERROR, error_class=type(exc).__name__, message=_normalize(exc), failing_op=spec.op,
                      reason="op raised on the backend")
    metrics["fallback_ops"] = fallback_ops(events)
    if adapter.device_type == "cpu":
        metrics["native"] = True
    else:
        metrics["native"] = (not events) if adapter.reports_fallbacks else None
    cmp = compare(spec.op, expected, actual, mode, upcast="reference" in metrics)
    metrics["max_abs_err"] = cmp.max_abs_err
    if not cmp.ok:
        return result(Status.FAIL, reason=f"mismatch: {cmp.reason}", failing_op=spec.op)
    return result(Status.PASS)
