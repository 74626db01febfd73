"""Choose the fewest layers that keep a config's layer pattern.

Each layer gets a signature from everything that makes it different: per-layer lists
(``layer_types``, ``layers_block_type``, a hybrid pattern string), membership in index lists
(``mlp_only_layers``, ``fullatt_block_indexes``), "first k layers" scalars and "every p-th layer"
scalars. The kept layers are a compressed prefix (first-k-dense becomes first-1-dense) plus one
period of the rest, aligned so that formulas like ``(i + 1) % p`` still give the same answer; an
irregular pattern keeps the first layer of each kind. Every per-layer field is then resampled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.build.rules import ShrinkRules


@dataclass
class LayerPlan:
    keep: list[int]  # original indices of the kept layers, ascending
    updates: dict[str, Any] = field(default_factory=dict)


def is_int(v: Any) -> bool:
    """An int that is not a bool (configs hold both)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _per_layer_fields(d: dict, n: int, r: ShrinkRules) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if k.endswith("_config") or isinstance(v, dict) or n < 2:
            continue
        if any(k.endswith(s) for s in r.token_id_suffixes) or _names_every_layer(k, v, n, r):
            continue
        if isinstance(v, list) and len(v) == n:
            out[k] = v
        elif isinstance(v, str) and len(v) == n and k.endswith("pattern"):
            out[k] = v
    return out


def _names_every_layer(k: str, v: Any, n: int, r: ShrinkRules) -> bool:
    """An index list that happens to name all n layers (LFM2's default `full_attn_idxs` is
    0..31): its entries are layer indices, not per-layer values, so each layer would otherwise
    get a signature of its own and none could be dropped."""
    return (
        isinstance(v, list)
        and len(v) == n
        and any(k.endswith(s) for s in r.index_list_suffixes)
        and v == list(range(n))
    )


def _index_lists(d: dict, n: int, r: ShrinkRules, per_layer: dict) -> dict[str, list[int]]:
    out = {}
    for k, v in d.items():
        if k in per_layer or k in r.index_list_exclude or not isinstance(v, list) or not v:
            continue
        if not any(k.endswith(s) for s in r.index_list_suffixes):
            continue
        if all(is_int(x) and 0 <= x < n for x in v):
            out[k] = v
    return out


def _index_dicts(d: dict, n: int) -> dict[str, dict]:
    """Dicts keyed by layer index (gemma4 ``per_layer_config``): {index: per-layer settings}."""
    out = {}
    for k, v in d.items():
        if not isinstance(v, dict) or not v or "layer" not in k or "model_type" in v:
            continue
        try:
            idx = [int(x) for x in v]
        except (TypeError, ValueError):
            continue
        if all(0 <= i < n for i in idx):
            out[k] = v
    return out


def _source_lists(per_layer: dict, n: int, r: ShrinkRules) -> dict[str, list[int]]:
    """Per-layer lists whose entry is the index of the layer a layer reads from, an earlier one
    producing its own (Kolibri's `kv_source_layers`: layer 9 reads layer 4's K/V): a layer's kind
    is whether it reads its own, is read by others or reads another; the entries are remapped."""
    out = {}
    for k, v in per_layer.items():
        if (
            any(k.endswith(s) for s in r.index_list_suffixes)
            and all(is_int(x) for x in v)
            and max(v) > 1
            and any(x < i for i, x in enumerate(v))  # not 0/1 flags, a reader
            and all(0 <= x <= i and v[x] == x for i, x in enumerate(v))
        ):
            out[k] = v
    return out


def _source_kind(v: list[int], i: int) -> str:
    return "reads" if v[i] != i else "read" if i in v[i + 1 :] else "own"


def smallest_period(seq: list) -> int:
    """The shortest q with seq[i] == seq[i + q] for every i (len(seq) when none is shorter)."""
    for q in range(1, len(seq) + 1):
        if all(seq[i] == seq[i + q] for i in range(len(seq) - q)):
            return q
    return len(seq)


def rescale_parts(parts: list[int], total: int) -> list[int]:
    """Integer parts summing to `total`, proportional to `parts` (largest remainder), each at
    least 1 while `total` allows it."""
    s = sum(parts)
    raw = [p * total / s for p in parts]
    out = [max(1, int(x)) for x in raw]
    while sum(out) < total:
        i = max(range(len(raw)), key=lambda j: raw[j] - out[j])
        out[i] += 1
    while sum(out) > total:
        shrinkable = [j for j in range(len(out)) if out[j] > 1] or list(range(len(out)))
        i = max(shrinkable, key=lambda j: out[j])
        out[i] -= 1
    return out


def rescale_parts_keeping_ties(parts: list[int], total: int) -> list[int]:
    """`rescale_parts`, but parts that were equal stay equal when some split of `total` allows it
    (multimodal rope sections: ERNIE-4.5-VL interleaves its equal height and width sections
    pairwise, so they must stay the same size)."""
    out = rescale_parts(parts, total)
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(parts):
        groups.setdefault(p, []).append(i)
    if all(len({out[i] for i in idx}) == 1 for idx in groups.values()):
        return out
    s = sum(parts)
    value = {p: max(1, int(p * total / s)) for p in groups}
    left = total - sum(value[p] * len(idx) for p, idx in groups.items())
    # whole groups take one more each, largest shortfall first, while they fit
    for p in sorted(groups, key=lambda q: q * total / s - value[q], reverse=True):
        if 0 < len(groups[p]) <= left:
            value[p] += 1
            left -= len(groups[p])
    if left != 0:
        return out
    return [value[p] for p in parts]


def select_layers(d: dict, n: int, r: ShrinkRules, min_layers: int) -> LayerPlan:
    per_layer = _per_layer_fields(d, n, r)
    sources = _source_lists(per_layer, n, r)
    index_lists = _index_lists(d, n, r, per_layer)
    prefixes = {f: d[f] for f in r.prefix_fields if is_int(d.get(f)) and 0 < d[f] < n}
    periods = [d[f] for f in r.period_fields if is_int(d.get(f)) and d[f] > 1]
    big_p = math.lcm(*periods) if periods else 1
    members = {k: set(v) for k, v in index_lists.items()}
    index_dicts = _index_dicts(d, n)
    dict_sigs = {k: {int(i): str(v) for i, v in dct.items()} for k, dct in index_dicts.items()}

    def sig(i: int) -> tuple:
        return (
            tuple(
                _source_kind(per_layer[k], i)
                if k in sources
                else per_layer[k][i]
                if not isinstance(per_layer[k][i], (list, dict))
                else str(per_layer[k][i])
                for k in per_layer
            )
            + tuple(i in members[k] for k in members)
            + tuple(dict_sigs[k].get(i) for k in dict_sigs)
            + tuple(i < p for p in prefixes.values())
            + (i % big_p,)
        )

    sigs = [sig(i) for i in range(n)]
    a = max(prefixes.values(), default=0)
    keep = [i for i in range(a) if i == 0 or sigs[i] != sigs[i - 1]]  # runs of the prefix
    rest = sigs[a:]
    q = smallest_period(rest) if rest else 0
    if rest and q <= max(1, len(rest) // 2):
        b = a
        while (b - len(keep)) % big_p and b + q < n:
            b += 1
        if (b - len(keep)) % big_p:
            b = a
        block = list(range(b, b + q))
        while len(keep) + len(block) < min(min_layers, n) and block[-1] + q < n:
            block += [x + q for x in block[-q:]]
        keep += block
    else:  # irregular: the first layer of each kind, in order
        seen: set = set()
        for i in range(a, n):
            if sigs[i] not in seen:
                seen.add(sigs[i])
                keep.append(i)
    i = keep[-1] + 1 if keep else 0
    while len(keep) < min(min_layers, n) and i < n:
        keep.append(i)
        i += 1
    keep = sorted(set(keep) | {v[i] for v in sources.values() for i in keep})  # a reader's source stays

    updates: dict[str, Any] = {}
    for k, v in per_layer.items():
        picked = [keep.index(v[i]) if k in sources else v[i] for i in keep]
        updates[k] = "".join(picked) if isinstance(v, str) else picked
    for k, v in index_lists.items():
        updates[k] = [keep.index(x) for x in v if x in keep]
    for k, dct in index_dicts.items():
        updates[k] = {
            type(key)(keep.index(int(key))) if isinstance(key, int) else str(keep.index(int(key))): v
            for key, v in dct.items()
            if int(key) in keep
        }
    if len(keep) != n:
        for f in r.drop_when_layers_change:
            if f in d:
                updates[f] = None
    for f in r.prefix_fields:
        if is_int(d.get(f)) and d[f] > 0:
            updates[f] = sum(1 for i in keep if i < d[f]) if d[f] < n else len(keep)
    return LayerPlan(keep=keep, updates=updates)
