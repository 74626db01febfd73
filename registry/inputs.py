"""Inputs of a replayed case: tensors of the recorded shapes, dtypes, strides and storage offsets
whose values satisfy the case's constraints (registry.constraints) and carry its boundary values
(registry.boundaries), built on the CPU and copied to the device under test.

    built = build_args(a_enc, k_enc, constraints, torch.Generator().manual_seed(seed))
    cpu_args = materialize(built, torch.device("cpu"))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from registry import boundaries
from registry.encoding import ABBREV_DTYPES, decode_scalar, decode_values


def _storage_size(shape: list[int], stride: list[int], offset: int) -> int:
    if any(s == 0 for s in shape):
        return offset
    return offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1


def _values(shape: list[int], dtype: torch.dtype, c: dict | None, gen: torch.Generator) -> torch.Tensor:
    """Values for a logical tensor of `shape` that satisfy constraint `c`."""
    kind = (c or {}).get("kind")
    n_shape = list(shape)
    if kind == "values":  # a repro's concrete values (the ones the failing call was given)
        return decode_values(c["values"], dtype, n_shape)
    if dtype == torch.bool and c and c.get("fill") is not None:  # a boundary variant: all-true / all-false
        return torch.full(n_shape, bool(c["fill"]), dtype=torch.bool)
    if dtype == torch.bool:
        density = float((c or {}).get("density", 0.5))
        if c and (c.get("count") is not None or c.get("source") == "observed"):
            # as many Trues as another input's shape needs (semantics: index_put's values) or as
            # the model had (observed; from the density for older recordings)
            numel = int(torch.Size(n_shape).numel())
            count = min(numel, int(c["count"] if c.get("count") is not None else round(density * numel)))
            flat = torch.zeros(numel, dtype=torch.bool)
            place = c.get("place")  # a boundary variant: the Trues packed at the first / last positions
            chosen = (
                torch.arange(count)
                if place == "first"
                else torch.arange(numel - count, numel)
                if place == "last"
                else torch.randperm(numel, generator=gen)[:count]
            )
            flat[chosen] = True
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
            scores = torch.rand([*shape[:d], high, *shape[d + 1 :]], generator=gen)
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
    wanted = (c or {}).get("plant")
    if stride is None and offset == 0:
        values = _values(shape, dtype, c, gen)
        return BuiltTensor(boundaries.plant(values, wanted) if wanted else values, None, shape, None, 0)
    stride = stride or _contiguous(shape)
    size = _storage_size(shape, stride, offset)
    if c is not None and c.get("kind") == "values":  # each logical element into its storage slot
        base = torch.zeros(size, dtype=dtype)
        slots = torch.full(shape, offset, dtype=torch.int64)
        for d, (n, st) in enumerate(zip(shape, stride)):
            slots += torch.arange(n).reshape([n if i == d else 1 for i in range(len(shape))]) * st
        base[slots.reshape(-1)] = _values(shape, dtype, c, gen).reshape(-1)
        return BuiltTensor(base.as_strided(shape, stride, offset), base, shape, stride, offset)
    counted = dtype == torch.bool and c is not None and c.get("count") is not None and "fill" not in c
    base = torch.zeros(size, dtype=dtype) if counted else _values([size], dtype, c, gen)
    view = base.as_strided(shape, stride, offset)
    if counted:  # the count is of the logical mask, not of its storage
        try:
            view.copy_(_values(shape, dtype, c, gen))
        except RuntimeError:  # elements that overlap (an expanded mask): see _counted_overlapping
            _counted_overlapping(base, shape, stride, offset, c, gen)
    if wanted:
        try:  # into the logical values (a view whose elements overlap cannot take them: left random)
            view.copy_(boundaries.plant(view, wanted))
        except RuntimeError:
            pass
    return BuiltTensor(view, base, shape, stride, offset)


def _counted_overlapping(
    base: torch.Tensor, shape: list[int], stride: list[int], offset: int, c: dict, gen: torch.Generator
) -> None:
    """A counted mask whose view repeats elements: an expanded one (stride 0, `mask.expand(...)`)
    repeats each stored value once per element of its stride-0 dims, so the stored mask (those dims
    at size 1) gets count / repeats Trues and the view shows `count` of them. Other overlaps: the
    storage gets the count."""
    distinct = [1 if st == 0 else int(n) for n, st in zip(shape, stride)]
    repeats = int(torch.Size(shape).numel()) // max(1, int(torch.Size(distinct).numel()))
    stored = base.as_strided(distinct, stride, offset)
    try:
        stored.copy_(_values(distinct, torch.bool, {**c, "count": int(c["count"]) // repeats}, gen))
    except RuntimeError:  # the remaining dims still overlap
        base.copy_(_values([base.numel()], torch.bool, c, gen))


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
