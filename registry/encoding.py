"""JSON encoding of one op call's arguments: the registry's signature and the replay's recipe.

A tensor becomes ``{"T": shape, "dt": "f16"}`` plus ``"st"`` (stride, only when not contiguous)
and ``"off"`` (storage offset, only when non-zero), the same facts PyTorch's operator-input logs
keep (``T([4, 2], f16, stride=(1, 4))``). Other values: dtypes, layouts, memory formats and
devices are tagged dicts; non-finite floats are tagged so the JSON stays standard; anything else
is ``{"opaque": type}`` and makes the call unreplayable. The device is normalized to ``"dev"``:
a call recorded on cpu and one imported from a CUDA log are the same signature.

    >>> enc = encode_args((torch.zeros(2, 3).t(), 1), {})
    >>> signature(*enc)
    '{"a":[{"T":[3,2],"dt":"f32","st":[1,3]},1],"k":{}}'
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import torch

from registry.errors import UnreplayableError

#: dtype abbreviations of PyTorch's operator-input logs (benchmarks/dynamo/microbenchmarks).
DTYPE_ABBREVS: dict[torch.dtype, str] = {
    torch.float16: "f16",
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
    torch.complex32: "c32",
    torch.complex64: "c64",
    torch.complex128: "c128",
}
for _name in (
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "uint16",
    "uint32",
    "uint64",
):
    if hasattr(torch, _name):
        DTYPE_ABBREVS[getattr(torch, _name)] = _name
ABBREV_DTYPES: dict[str, torch.dtype] = {v: k for k, v in DTYPE_ABBREVS.items()}

LAYOUTS = {torch.strided: "strided", torch.sparse_coo: "sparse_coo", torch.sparse_csr: "sparse_csr"}
MEMORY_FORMATS = {
    torch.contiguous_format: "contiguous_format",
    torch.channels_last: "channels_last",
    torch.channels_last_3d: "channels_last_3d",
    torch.preserve_format: "preserve_format",
}
_LAYOUT_BY_NAME = {v: k for k, v in LAYOUTS.items()}
_MEMFMT_BY_NAME = {v: k for k, v in MEMORY_FORMATS.items()}


def contiguous_strides(shape: list[int] | tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(int(size), 1)
    return strides[::-1]


_STRIDED = torch.strided


def encode_tensor(t: torch.Tensor) -> dict[str, Any]:
    shape = [int(s) for s in t.shape]
    dtype = t.dtype
    enc: dict[str, Any] = {"T": shape, "dt": DTYPE_ABBREVS.get(dtype) or str(dtype)}
    if t.layout is not _STRIDED:
        enc["layout"] = LAYOUTS.get(t.layout, str(t.layout))
        return enc
    # (PyTorch's contiguity is the rule below whenever the tensor has elements: one C++ call)
    if not (t.is_contiguous() and t.numel()):
        stride = [int(s) for s in t.stride()]
        if not _is_contiguous(shape, stride):
            enc["st"] = stride
    offset = int(t.storage_offset())
    if offset:
        enc["off"] = offset
    return enc


def _is_contiguous(shape: list[int], stride: list[int]) -> bool:
    expected = contiguous_strides(shape)
    return all(sz == 1 or st == ex for sz, st, ex in zip(shape, stride, expected))


def encode_value(v: Any) -> Any:
    """One argument to JSON-able form (recursive over lists/tuples)."""
    if isinstance(v, torch.Tensor):
        return encode_tensor(v)
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return {"float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, (list, tuple)):
        return [encode_value(x) for x in v]
    if isinstance(v, torch.dtype):
        return {"dtype": DTYPE_ABBREVS.get(v, str(v))}
    if isinstance(v, torch.device):
        return {"device": "dev"}
    if isinstance(v, torch.layout):
        return {"layout": LAYOUTS.get(v, str(v))}
    if isinstance(v, torch.memory_format):
        return {"memory_format": MEMORY_FORMATS.get(v, str(v))}
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return encode_value({torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(v)](v))
    if isinstance(v, complex):
        return {"complex": [v.real, v.imag]}
    return {"opaque": type(v).__name__}


def encode_args(args: tuple, kwargs: dict | None) -> tuple[list, dict]:
    return [encode_value(a) for a in args], {k: encode_value(v) for k, v in sorted((kwargs or {}).items())}


_SIGNATURE_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))  # what json.dumps builds per call


#: how a call runs when its signature says so (`run`): eager calls carry no `run` key
RUNS = ("compiled",)


def signature(args_enc: list, kwargs_enc: dict, run: str = "") -> str:
    """Canonical JSON of a call's arguments: equal calls give byte-equal strings. `run="compiled"`
    marks a call that runs through the backend's compiler (a compiled-only root cause): another
    case than the same call run eagerly."""
    if run and run not in RUNS:
        raise ValueError(f"run {run!r}: use one of {RUNS}")
    return _SIGNATURE_JSON.encode({"a": args_enc, "k": kwargs_enc, **({"run": run} if run else {})})


def run_of(sig: str) -> str:
    """How a case's call runs: "" (eagerly) or "compiled"."""
    return str(json.loads(sig).get("run") or "") if '"run"' in sig else ""


def encode_values(t: torch.Tensor) -> list:
    """A tensor's values as a flat JSON list (non-finite floats as "nan", "inf", "-inf"): the
    concrete values a repro keeps where they matter (indices, masks, boundary rows)."""
    flat = t.detach().to("cpu").reshape(-1)
    if flat.dtype in (torch.bfloat16, torch.float16):
        flat = flat.float()
    values = flat.tolist()
    if t.is_floating_point():
        return [
            v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
            for v in values
        ]
    return values


def decode_values(values: list, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    """`encode_values`' list back as a tensor of `shape` and `dtype`."""
    if dtype.is_floating_point:
        values = [float(v) for v in values]
        return torch.tensor(values, dtype=torch.float64).to(dtype).reshape(shape)
    return torch.tensor(values, dtype=dtype).reshape(shape)


def signature_hash(op: str, sig: str) -> str:
    return hashlib.sha1(f"{op}|{sig}".encode()).hexdigest()[:12]


def case_id(op: str, sig: str) -> str:
    """The stable test id: op plus a hash of its signature, e.g. ``aten.mm.default-1f2e3d4c5b6a``."""
    return f"{op}-{signature_hash(op, sig)}"


def parse_signature(sig: str) -> tuple[list, dict]:
    d = json.loads(sig)
    return d["a"], d["k"]


def iter_tensors(enc: Any, path: str = ""):
    """Yield (path, tensor-encoding) for every tensor inside an encoded value; paths like ``a.1.0``."""
    if isinstance(enc, dict):
        if "T" in enc:
            yield path, enc
        return
    if isinstance(enc, list):
        for i, x in enumerate(enc):
            yield from iter_tensors(x, f"{path}.{i}" if path else str(i))


def find_opaque(enc: Any) -> str | None:
    """The type name of the first argument that cannot be rebuilt, or None."""
    if isinstance(enc, dict):
        if "opaque" in enc:
            return enc["opaque"]
        if "T" in enc and (enc["dt"] not in ABBREV_DTYPES or "layout" in enc):
            return f"tensor {enc['dt']} {enc.get('layout', '')}".strip()
        return None
    if isinstance(enc, list):
        for x in enc:
            found = find_opaque(x)
            if found:
                return found
    return None


def decode_scalar(enc: Any, device: torch.device) -> Any:
    """Rebuild a non-tensor argument (tensors are built by registry.replay)."""
    if isinstance(enc, dict):
        if "dtype" in enc:
            return ABBREV_DTYPES[enc["dtype"]]
        if "device" in enc:
            return device
        if "layout" in enc:
            return _LAYOUT_BY_NAME[enc["layout"]]
        if "memory_format" in enc:
            return _MEMFMT_BY_NAME[enc["memory_format"]]
        if "float" in enc:
            return float(enc["float"])
        if "complex" in enc:
            return complex(*enc["complex"])
        raise UnreplayableError(f"cannot rebuild argument {enc}")
    return enc
