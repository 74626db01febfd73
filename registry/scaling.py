"""Scaled replay: make a case with huge tensors feasible while keeping its structure.

Op logs from real training runs hold calls like softmax over [4, 12, 1024, 1024] f16, and CPU f16
matmuls at that size take tens of seconds. When a case's largest tensor exceeds the replay budget
(``HARNESS_REPLAY_MAX_NUMEL``, default 2**18 elements), every size that is a multiple of a power of
two s (and at least max(8*s, 64): batch, heads and head dims stay) is divided by s, doubling s
until the case fits — consistently in shapes, integer-list arguments, integer scalars and index
bounds, with dense strides recomputed in the same dim order. The scaled call is
accepted only if it runs on the meta device and its output shapes are the original ones scaled the
same way; a consistent scaling that gets within 64x the budget is used, else the case runs at full size
up to 64x the budget, and beyond that it is
reported unreplayable (too large). The factor is kept in the result metrics (``scaled_by``).
"""

from __future__ import annotations

from typing import Any

import torch

from contracts.settings import current
from registry.encoding import ABBREV_DTYPES, contiguous_strides, decode_scalar, iter_tensors
from registry.errors import TooLargeError

HARD_CAP_FACTOR = 64


#: Ops whose integer arguments are explicit strides/offsets: never scaled (run at full size).
NOT_SCALABLE = (
    "aten.as_strided",
    "aten.as_strided_",
    "aten.as_strided_scatter",
    "aten.empty_strided",
    "aten.new_empty_strided",
    "aten.set_",
)


def budget() -> int:
    return current().replay_max_numel


def hard_cap(limit: int | None = None) -> int:
    return (limit or budget()) * HARD_CAP_FACTOR


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def max_numel(a_enc: list, k_enc: dict) -> int:
    tensors = [t for _, t in iter_tensors([a_enc, list(k_enc.values())])]
    return max((_numel(t["T"]) for t in tensors), default=0)


MIN_SCALED_DIM = 64  # smaller sizes (batch, heads, head dim, kernel sizes) are never scaled


def _map_int(d: int, s: int) -> int:
    return d // s if d >= max(8 * s, MIN_SCALED_DIM) and d % s == 0 else d


def _dense_order(shape: list[int], stride: list[int]) -> list[int] | None:
    """Dims from innermost to outermost if the layout is a permutation of a dense one."""
    dims = [i for i in range(len(shape)) if shape[i] != 1 and stride[i] != 0]
    order = sorted(dims, key=lambda i: stride[i])
    expected = 1
    for i in order:
        if stride[i] != expected:
            return None
        expected *= shape[i]
    return order


def _scale_tensor(t: dict, s: int) -> dict:
    if t.get("off"):
        raise TooLargeError("storage offset")
    shape = [_map_int(d, s) for d in t["T"]]
    out = dict(t, T=shape)
    if "st" in t:
        order = _dense_order(t["T"], t["st"])
        if order is None:
            raise TooLargeError("non-dense strides")
        stride = [0 if st == 0 else 1 for st in t["st"]]
        acc = 1
        for i in order:
            stride[i] = acc
            acc *= shape[i]
        for i in range(len(shape)):
            if shape[i] == 1 and t["st"][i] != 0:
                stride[i] = contiguous_strides(shape)[i]
        out["st"] = stride
    return out


def _scale(enc: Any, s: int) -> Any:
    if isinstance(enc, dict):
        return _scale_tensor(enc, s) if "T" in enc else enc
    if isinstance(enc, list):
        return [_scale(x, s) for x in enc]
    if isinstance(enc, int) and not isinstance(enc, bool):
        return _map_int(enc, s)
    return enc


def _scale_constraints(constraints: dict, s: int) -> dict:
    out = {}
    for path, c in constraints.items():
        c = dict(c)
        if c.get("kind") in ("index", "offsets") and isinstance(c.get("high"), int):
            c["high"] = _map_int(c["high"], s)
        out[path] = c
    return out


def _meta(enc: Any) -> Any:
    if isinstance(enc, dict) and "T" in enc:
        shape = enc["T"]
        stride = enc.get("st") or contiguous_strides(shape)
        return torch.empty_strided(shape, stride, dtype=ABBREV_DTYPES[enc["dt"]], device="meta")
    if isinstance(enc, list):
        return [_meta(x) for x in enc]
    return decode_scalar(enc, torch.device("meta"))


def _out_shapes(func: Any, a_enc: list, k_enc: dict) -> list[list[int]]:
    out = func(*_meta(a_enc), **{k: _meta(v) for k, v in k_enc.items()})
    flat = out if isinstance(out, (list, tuple)) else [out]
    shapes = []
    for x in flat:
        if isinstance(x, torch.Tensor):
            shapes.append(list(x.shape))
        elif isinstance(x, (list, tuple)):
            shapes += [list(y.shape) for y in x if isinstance(y, torch.Tensor)]
    return shapes


def fit(func: Any, a_enc: list, k_enc: dict, constraints: dict, limit: int | None = None):
    """(args, kwargs, constraints, factor) within the budget; TooLargeError if impossible."""
    limit = limit or budget()
    biggest = max_numel(a_enc, k_enc)
    if biggest <= limit:
        return a_enc, k_enc, constraints, 1
    if any(c.get("kind") == "values" for c in constraints.values()):  # a repro runs as it failed
        if biggest <= limit * HARD_CAP_FACTOR:
            return a_enc, k_enc, constraints, 1
        raise TooLargeError(f"largest tensor has {biggest} elements and the case keeps concrete values")
    try:
        scalable = not str(func).startswith(tuple(p + "." for p in NOT_SCALABLE))
        original = _out_shapes(func, a_enc, k_enc) if scalable else None
    except Exception:  # noqa: BLE001 - no meta kernel: cannot validate a scaled call
        original = None
    best = None  # (numel, args, kwargs, factor)
    s = 2
    while original is not None and s <= 4096:
        try:
            sa, sk = _scale(a_enc, s), {k: _scale(v, s) for k, v in k_enc.items()}
            scaled = _out_shapes(func, sa, sk)
        except Exception:  # noqa: BLE001 - not scalable, or inconsistent after scaling
            break
        n = max_numel(sa, sk)
        if scaled != [[_map_int(d, s) for d in shp] for shp in original] or (best and n >= best[0]):
            break
        best = (n, sa, sk, s)
        if n <= limit:
            break
        s *= 2
    if best is not None and best[0] <= limit * HARD_CAP_FACTOR:
        return best[1], best[2], _scale_constraints(constraints, best[3]), best[3]
    if biggest <= limit * HARD_CAP_FACTOR:
        return a_enc, k_enc, constraints, 1
    raise TooLargeError(
        f"largest tensor has {biggest} elements (budget {limit}) and cannot be scaled consistently"
    )
