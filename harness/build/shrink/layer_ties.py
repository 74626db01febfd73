"""Layer-count ties the layer selection must keep (data/shrink_rules.yaml names the fields).

- partitions: fields that split the layers into consecutive groups (Dory's input / recurrent /
  output layers) must still sum to the new layer count: each is rescaled, at least 1;
- suffix counts: "the last k layers are different" (Gemma-3n's KV-sharing layers) keeps k below
  the new count, leaving one pattern period of producers before the consumers; k equal to the
  layer count (every layer shares: Gemma-4's assistant) stays equal to it; tail counts ("the last
  k layers also see the queries": EoMT) keep at least one such layer and one before them;
- multiples: a count that was k x the layer count (HRM's invocations of its looped stack) stays
  k x the new count;
- layer indices into another config's stack (a VLM adapter's ``vision_feature_layer``) are
  remapped into the shrunk stack, keeping their distance from its end and staying distinct.
"""

from __future__ import annotations

from typing import Any

from harness.build.rules import ShrinkRules
from harness.build.shrink.layers import is_int, rescale_parts, smallest_period


def tie_layer_counts(d: dict, r: ShrinkRules, old_n: int, new_n: int) -> None:
    """Partitions and suffix counts of one config level after its layers went old_n -> new_n."""
    ties = r.layer_ties
    for group in ties.partitions:
        values = [d.get(f) for f in group]
        if all(is_int(v) and v > 0 for v in values) and sum(values) == old_n and new_n >= len(group):
            for f, v in zip(group, rescale_parts(values, new_n)):
                d[f] = v
    kinds = next(
        (
            d[f]
            for f in ("layer_types", "layers_block_type")
            if isinstance(d.get(f), list) and len(d[f]) == new_n
        ),
        None,
    )
    period = smallest_period(kinds) if kinds else 1
    for f in ties.suffix_counts:
        k = d.get(f)
        if is_int(k) and k == old_n:  # every layer is one (an assistant reads the target's KV)
            d[f] = new_n
        elif is_int(k) and 0 < k < old_n and k >= new_n - period + 1:
            d[f] = max(0, min(new_n - period, round(k * new_n / old_n)))
    for f in ties.multiples:
        k = d.get(f)
        if is_int(k) and k > old_n and k % old_n == 0:
            d[f] = k // old_n * new_n
    for f in ties.tail_counts:
        k = d.get(f)
        if is_int(k) and 0 < k < old_n and k >= new_n:
            d[f] = max(1, min(k, new_n - 1))


def _layer_count(d: Any, r: ShrinkRules) -> int | None:
    if not isinstance(d, dict):
        return None
    for f in r.layer_count_fields:
        if is_int(d.get(f)) and d[f] > 0:
            return d[f]
    return None


def remap_foreign_indices(original: dict, shrunk: dict, r: ShrinkRules) -> None:
    """Index lists that point into a sub-config's layer stack (`layer_ties.foreign_indices`:
    {field: sub-config key}), at any level, follow that stack's new length."""
    foreign = r.layer_ties.foreign_indices
    stacks = {
        key: (_layer_count(original.get(key), r), _layer_count(shrunk.get(key), r))
        for key in set(foreign.values())
    }

    def visit(o: dict, s: dict) -> None:
        for k, v in list(s.items()):
            if isinstance(v, dict) and isinstance(o.get(k), dict):
                visit(o[k], v)
                continue
            old_n, new_n = stacks.get(foreign.get(k), (None, None))
            if not (old_n and new_n and new_n < old_n):
                continue
            values = v if isinstance(v, list) else [v]
            if not all(is_int(x) for x in values) or all(-new_n <= x < new_n for x in values):
                continue
            mapped: list[int] = []
            for x in values:
                # from the end, as before; a negative index beyond the shrunk stack becomes its
                # first layer (VipLLaVA taps -2, -5, -8, -11 of 24), repeated when it must be
                y = max(x, -new_n) if x < 0 else min(new_n - 1, max(0, new_n - (old_n - x)))
                while y in mapped and y > (-new_n if y < 0 else 0):
                    y -= 1
                mapped.append(y)
            s[k] = mapped if isinstance(v, list) else mapped[0]

    visit(original, shrunk)
