"""Boundary values of constrained inputs, as property-based tests pick them.

Random valid values almost never hit the edges where kernels go wrong: among 64 random indices into
a 30,522-row embedding the last row turns up once in 500 cases. So every replay of a case also
takes the boundary values of each constrained input:

* an index (embedding rows, gather/scatter positions, class ids): the lowest and the highest valid
  value (index 0 and the last row, the largest class id) and the op's special values (an
  embedding's padding index, nll_loss's ignore index: ``special`` in data/op_semantics.yaml);
  they are planted into the random values (a value already present is not planted again, so
  unique indices stay unique); what does not fit into one tensor goes into extra variants;
* an integer range (repeat counts, observed integer inputs): its lowest and highest value;
* a boolean mask (any boolean input): the all-true and the all-false mask, as extra variants; a
  mask whose True count another input's shape fixes (index_put's values): that many Trues packed
  at the first and at the last positions.

A variant is a name plus constraint overrides (``{"a.1": {..., "plant": [values]}}``); the replay
builds the inputs of each variant from the same seed and fails the case if any variant fails.
"""

from __future__ import annotations

from typing import Any

import torch

from registry.encoding import iter_tensors

#: The variant every case runs: random valid values with the boundary values that fit planted in.
BASE = "random"


def boundary_values(c: dict | None) -> list[int]:
    """The boundary values of an integer constraint, most important first (high-1, low, specials)."""
    if not c or c.get("kind") not in ("index", "range"):
        return []
    low, high = int(c.get("low", 0)), int(c.get("high", 1))
    high = max(high, low + 1)
    values = [high - 1, low, *[int(v) for v in c.get("special") or []]]
    return list(dict.fromkeys(values))


def plant(values: torch.Tensor, wanted: list[int]) -> torch.Tensor:
    """`values` with each of `wanted` present: planted at the last, first, second, ... position
    unless already present (so an index tensor without repeats keeps none); a position that already
    holds a wanted value is never overwritten."""
    flat = values.reshape(-1).clone()
    n = flat.numel()
    order = list(dict.fromkeys(p for i in range((n + 1) // 2) for p in (n - 1 - i, i)))
    keep: set[int] = set()
    missing = []
    for v in wanted:
        hit = (flat == v).nonzero()
        if hit.numel():
            keep.add(int(hit[0, 0]))
        else:
            missing.append(v)
    free = (p for p in order if p not in keep)
    for v, pos in zip(missing, free):
        flat[pos] = v
    return flat.reshape(values.shape)


def _tensors(a_enc: list, k_enc: dict) -> list[tuple[str, dict]]:
    out = [(f"a.{p}", t) for p, t in iter_tensors(a_enc)]
    for k, v in k_enc.items():
        out += [(f"k.{k}" + (f".{p}" if p else ""), t) for p, t in iter_tensors(v)]
    return out


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def variants(a_enc: list, k_enc: dict, constraints: dict[str, dict]) -> list[tuple[str, dict[str, dict]]]:
    """[(name, constraints)]: the base variant first, then one per boundary the base cannot hold."""
    base = {path: dict(c) for path, c in constraints.items()}
    extra: list[tuple[str, dict[str, dict]]] = []
    for path, enc in _tensors(a_enc, k_enc):
        numel = _numel(enc["T"])
        if numel == 0:
            continue
        c = constraints.get(path)
        if c and c.get("kind") == "values":
            continue  # a repro's concrete values are the case
        if enc.get("dt") == "b8":
            if c and c.get("count_of"):  # the count is fixed by another input's shape: its edges
                for place in ("first", "last"):
                    extra.append((f"{path}={place}-{c['count']}", {**base, path: {**c, "place": place}}))
                continue
            for name, fill in (("all-true", True), ("all-false", False)):
                over = {**base, path: {**(c or {}), "kind": "mask", "fill": fill}}
                extra.append((f"{path}={name}", over))
            continue
        wanted = boundary_values(c)
        if not wanted:
            continue
        # a strided view may alias storage: planting goes into the logical values, the first numel of them
        base[path] = {**base[path], "plant": wanted[:numel]}
        rest = wanted[numel:]
        for i in range(0, len(rest), numel):
            group = rest[i : i + numel]
            extra.append(
                (f"{path}=" + ",".join(map(str, group)), {**base, path: {**base[path], "plant": group}})
            )
    return [(BASE, base)] + extra


def describe(name: str) -> str:
    return "random valid values with boundary values planted" if name == BASE else f"boundary variant {name}"


def applies(constraints: dict[str, Any]) -> bool:
    return any("plant" in c or "fill" in c for c in constraints.values())
