"""Shrink rules for architecture families (data/shrink_rules.yaml names their fields): mixture of
experts, multi-head latent attention (MLA), state-space / recurrent layers, multimodal sub-configs
and sliding windows. harness.build.shrink.shrink_dict applies them after the common width rules.
"""

from __future__ import annotations

import itertools
import json
import math

from harness.build.rules import ShrinkRules
from harness.build.shrink.layers import is_int


def shrink_experts(d: dict, r: ShrinkRules, hidden: int) -> None:
    for f in r.expert_intermediate_fields:
        if is_int(d.get(f)) and d[f] > hidden:
            d[f] = hidden
    fill = r.fill_none_experts_per_token
    if fill and any(is_int(d.get(f)) and d[f] > 1 for f in r.expert_count_fields):
        for f in r.experts_per_token_fields:
            if f in d and d[f] is None:  # the default leaves the router's top-k unset (deepseek_v2)
                d[f] = fill
    top_k = next((d[f] for f in r.experts_per_token_fields if is_int(d.get(f)) and d[f] > 0), 1)
    gf = r.expert_group_fields
    groups = d.get(gf.groups) if is_int(d.get(gf.groups)) and d[gf.groups] > 1 else None
    for f in r.expert_count_fields:
        n = d.get(f)
        if not is_int(n) or n <= 1:
            continue
        if groups and n % groups == 0:
            per_tok_groups = d.get(gf.groups_per_token) or groups
            per_group = max(2, math.ceil(top_k / max(1, per_tok_groups)))
            target = groups * per_group
        else:
            target = max(r.targets.experts_min, 2 * top_k)
        if n > target:
            d[f] = target


def shrink_mla(d: dict, r: ShrinkRules, old: dict) -> None:
    if "kv_lora_rank" not in d and "index_topk" not in d:
        return
    for f, v in r.mla.items():
        if is_int(d.get(f)) and d[f] > v:
            d[f] = v
    for a, b in r.ties:
        if a in old and is_int(old.get(a)):
            if "+" in b:
                parts = b.split("+")
                if all(is_int(old.get(p)) for p in parts) and old[a] == sum(old[p] for p in parts):
                    d[a] = sum(d[p] for p in parts)
            elif is_int(old.get(b)) and old[a] == old[b]:
                d[a] = d[b]
    _keep_partial_rope(d, old)


def _partial_rotary_factor(d: dict) -> float | None:
    rp = d.get("rope_parameters")
    for p in [rp] + (list(rp.values()) if isinstance(rp, dict) else []):
        if isinstance(p, dict) and isinstance(p.get("partial_rotary_factor"), float):
            return p["partial_rotary_factor"]
    return None


def _keep_partial_rope(d: dict, old: dict) -> None:
    """A rope part that is `partial_rotary_factor` of the head (DeepSeek-V4: 64 of 512, the rest
    is the nope part) stays that share of the shrunk head, at least 2 wide: the fixed MLA rope
    size would be the whole tiny head and leave a nope part of 0."""
    prf = _partial_rotary_factor(d)
    hd, rope = old.get("head_dim"), old.get("qk_rope_head_dim")
    if not (
        prf
        and 0 < prf < 1
        and is_int(hd)
        and is_int(rope)
        and rope == round(hd * prf)
        and is_int(d.get("head_dim"))
        and is_int(d.get("qk_rope_head_dim"))
        and d["qk_rope_head_dim"] >= d["head_dim"]
    ):
        return
    d["head_dim"] = max(d["head_dim"], math.ceil(2 / prf))
    d["qk_rope_head_dim"] = max(2, 2 * round(d["head_dim"] * prf / 2))


def shrink_ssm(d: dict, r: ShrinkRules, hidden: int) -> None:
    s = r.ssm
    t = r.targets
    for f in s.state_fields:
        if is_int(d.get(f)) and d[f] > t.state_size:
            d[f] = t.state_size
    for f in s.dt_rank_fields:
        if is_int(d.get(f)) and d[f] > hidden // 4:
            d[f] = max(1, hidden // 4)
    for f in s.chunk_fields:
        if is_int(d.get(f)) and d[f] > t.test_sequence_length:
            d[f] = t.test_sequence_length
    expand = next((d[f] for f in s.expand_fields if isinstance(d.get(f), (int, float)) and d[f] > 0), 2)
    inner = int(expand * hidden)
    hd_f = next((f for f in s.ssm_head_dim_fields if is_int(d.get(f))), None)
    nh_f = next((f for f in s.ssm_head_count_fields if is_int(d.get(f))), None)
    if nh_f is None and _pure_ssm(d, r):
        nh_f, hd_f = s.generic_head_fields.count, s.generic_head_fields.dim
    if nh_f:
        hd = s.ssm_head_dim
        if hd_f:
            d[hd_f] = min(d[hd_f], hd)
            hd = d[hd_f]
        d[nh_f] = max(1, inner // hd)
        for f in s.group_fields:
            if is_int(d.get(f)) and d[f] > 1:
                d[f] = math.gcd(d[f], d[nh_f])
    for f in s.ssm_inner_fields:
        if is_int(d.get(f)) and d[f] > inner:
            d[f] = inner


def _pure_ssm(d: dict, r: ShrinkRules) -> bool:
    """A level with SSM state and expansion, no attention heads (no other query-head field of
    `head_pairs`), and the generic head pair (`generic_head_fields`): those heads are the SSM's."""
    s = r.ssm
    g = s.generic_head_fields
    attention = {q for q, _ in r.head_pairs} - {g.count}
    return (
        any(is_int(d.get(f)) for f in s.state_fields)
        and any(isinstance(d.get(f), (int, float)) for f in s.expand_fields)
        and is_int(d.get(g.count))
        and is_int(d.get(g.dim))
        and not any(is_int(d.get(f)) for f in attention)
    )


# --------------------------------------------------------------------------- vision / audio / misc
def shrink_modalities(d: dict, r: ShrinkRules) -> dict[int, int]:
    """Vision, audio and per-stage sizes of one level; returns the stage widths' {old: new}."""
    t = r.targets
    patch = next((_side(d[f]) for f in r.patch_size_fields if _side(d.get(f))), None)
    # a hierarchical model (convnext, swin) halves its patch grid before each later stage: the
    # grid must keep at least one patch at the last stage
    stages = next((len(d[f]) for f in r.stage_depth_list_fields if isinstance(d.get(f), list) and d[f]), 1)
    # (windowed attention, swin: a whole window there; the window size the type's override sets)
    window = r.overrides.get(d.get("model_type"), {}).get("window_size", d.get("window_size"))
    window = window if is_int(window) and stages > 1 else 1
    per_side = max(t.image_patches_per_side, 2 ** (stages - 1) * window)
    # a net that downsamples by `output_stride` before it patches its feature map (MobileViTV2)
    stride = max([d[f] for f in r.output_stride_fields if is_int(d.get(f))] + [1])
    for f in r.image_size_fields:
        v = d.get(f)
        target = (patch or 8) * max(per_side, stride)
        if is_int(v) and v > target:
            d[f] = target
        elif isinstance(v, list) and len(v) == 2 and all(is_int(x) for x in v) and max(v) > target:
            d[f] = [target, target]
    per_image = t.image_patches_per_side**2
    for f in r.image_token_count_fields:
        if is_int(d.get(f)) and d[f] > per_image:
            d[f] = per_image
    a = r.audio
    for f in a.source_position_fields:
        if is_int(d.get(f)) and d[f] > t.audio_source_positions:
            d[f] = t.audio_source_positions
    for f in a.conv_channel_list_fields:
        v = d.get(f)
        if isinstance(v, list) and v and all(is_int(x) for x in v):
            d[f] = [min(x, t.conv_channels) for x in v]
    for f in a.conv_pos_embedding_fields:
        if is_int(d.get(f)) and d[f] > t.test_sequence_length:
            d[f] = t.test_sequence_length
    for f, v in a.small_fields.items():
        if is_int(d.get(f)) and d[f] > v:
            d[f] = v
    widths = shrink_stage_widths(d, r)
    for f in r.stage_depth_list_fields:
        v = d.get(f)
        if isinstance(v, list) and v and all(is_int(x) for x in v):
            d[f] = [min(x, r.stage_depth_max) for x in v]
            _follow_depths(d, v, d[f], widths)
    for f in r.block_repeat_list_fields:  # per-stage repeats that set no grid
        v = d.get(f)
        if isinstance(v, list) and v and all(is_int(x) for x in v):
            d[f] = [min(x, r.stage_depth_max) for x in v]
    for f, cap in r.depth_scale_fields.items():
        if isinstance(d.get(f), (int, float)) and not isinstance(d[f], bool) and d[f] > cap:
            d[f] = cap
    for f in r.stage_head_list_fields:
        v = d.get(f)
        if isinstance(v, list) and v and all(is_int(x) and x > 0 for x in v):
            d[f] = [max(1, x // v[0]) for x in v]
    return widths


def _follow_depths(d: dict, old: list[int], new: list[int], widths: dict[int, int]) -> None:
    """Per-block lists spelled out stage by stage (PP-LCNet's `block_configs`, UVDoc's
    `stage_configs`: one entry per block, so their lengths are the depths) keep the first blocks
    of each stage, and the widths they name follow the stage widths."""

    def remap(x):
        if isinstance(x, list):
            return [remap(y) for y in x]
        return widths.get(x, x) if is_int(x) else x

    for k, v in list(d.items()):
        if (
            isinstance(v, list)
            and len(v) == len(old)
            and all(isinstance(x, list) for x in v)
            and [len(x) for x in v] == old
        ):
            d[k] = [remap(blocks[:n]) for blocks, n in zip(v, new)]


def shrink_stage_widths(d: dict, r: ShrinkRules) -> dict[int, int]:
    """Per-stage width lists of one config level, scaled by one factor (the narrowest list that
    is wider than `stage_width_first` starts at it), the same old width to the same new width in
    every list: the lists chain (a stage's input is the stem's or the previous stage's output), so
    scaling each by its own first entry breaks the chain. Widths at most `stage_width_first` (input
    channels, a narrow stem) stay. Returns {old width: new width}."""
    first = r.stage_width_first
    lists = {
        f: d[f]
        for f in r.stage_width_list_fields
        if isinstance(d.get(f), list) and d[f] and all(is_int(x) and x > 0 for x in d[f])
    }
    # a top-down list (an FPN's [768, 384, 192, 96]) names its first stage last
    wide = [v[-1] if _descending(v) else v[0] for v in lists.values()]
    wide = [x for x in wide if x > first]
    if not wide:
        return {}
    scale = first / min(wide)
    mapping = {x: max(1, round(x * scale)) for v in lists.values() for x in v if x > first}
    for f, v in lists.items():
        d[f] = [mapping.get(x, x) for x in v]
    return mapping


def _descending(v: list[int]) -> bool:
    return len(v) > 1 and all(a > b for a, b in itertools.pairwise(v))


def shrink_windows(d: dict, r: ShrinkRules) -> None:
    seq = r.targets.test_sequence_length
    patch = next((d[f] for f in r.context_patch_fields if is_int(d.get(f))), None)
    context = max(seq, r.context_patches * patch) if is_int(patch) and patch > 0 else seq
    for f in r.context_length_fields:
        if is_int(d.get(f)) and d[f] > context:
            d[f] = context
    for f in r.window_fields:
        if is_int(d.get(f)) and d[f] >= seq:
            d[f] = seq // 2
    mp = r.targets.max_position_embeddings
    v = d.get("max_position_embeddings")
    rope_orig = any(
        isinstance(d.get(k), dict) and "original_max_position_embeddings" in json.dumps(d[k])
        for k in ("rope_parameters", "rope_scaling")
    )
    if is_int(v) and v > mp and not rope_orig:
        d["max_position_embeddings"] = mp


def _side(v) -> int | None:
    if is_int(v):
        return v
    if isinstance(v, list) and len(v) == 2 and all(is_int(x) for x in v) and v[0] == v[1]:
        return v[0]
    return None


def tie_image_sizes(original: dict, shrunk: dict, r: ShrinkRules) -> None:
    """One image size for the whole model: each level shrinks its own `image_size` to its patch
    grid, but a backbone, its prompt encoder and the outer config see the same image. Every field
    that had the same old size gets the largest of their new sizes (so every level keeps its
    minimum patch grid), and feature-map sizes derived from the image (`image_grid_fields`, SAM 2's
    `backbone_feature_sizes`) scale with it."""
    pairs: list[tuple[dict, dict]] = []

    def walk(o: dict, s: dict) -> None:
        pairs.append((o, s))
        for k, v in s.items():
            if isinstance(v, dict) and isinstance(o.get(k), dict):
                walk(o[k], v)

    walk(original, shrunk)
    new_of: dict[int, int] = {}
    for o, s in pairs:
        for f in r.image_size_fields:
            old, new = _side(o.get(f)), _side(s.get(f))
            if old and new and new < old:
                new_of[old] = max(new_of.get(old, 0), new)
    if not new_of:
        return
    for o, s in pairs:
        for f in r.image_size_fields:
            old = _side(o.get(f))
            if old in new_of and _side(s.get(f)) != new_of[old]:
                s[f] = [new_of[old]] * 2 if isinstance(s[f], list) else new_of[old]
    biggest = max(new_of)
    ratio = new_of[biggest] / biggest
    for o, s in pairs:  # a "patch" that is a sub-model's whole image (Depth Pro's 384 px patches)
        for f in r.patch_size_fields:
            if is_int(o.get(f)) and o[f] in new_of and s.get(f) == o[f]:
                s[f] = new_of[o[f]]

    def scale(v):
        if isinstance(v, list):
            return [scale(x) for x in v]
        return max(1, round(v * ratio)) if is_int(v) else v

    for o, s in pairs:
        for f in r.image_grid_fields:
            if f in s and s[f] == o.get(f):
                s[f] = scale(s[f])


def shrink_patch_count_keys(d: dict, r: ShrinkRules) -> None:
    """Dicts keyed by the patch count of each image size a projector supports (Aria's
    `projector_patch_to_query_dict`, {35²: 128, 70²: 256}) follow the shrunk patch grid: the
    smallest key becomes the grid of a sub-config's shrunk image, the others keep their side ratio
    to it; the query counts are capped at the new patch count."""
    grid = _patch_grid(d)
    for f in r.patch_count_keyed_fields:
        table = d.get(f)
        if not (isinstance(table, dict) and table and grid):
            continue
        sides = {k: math.isqrt(int(k)) for k in table}
        if any(s * s != int(k) for k, s in sides.items()):
            continue  # keys that are no square grid: not a patch count
        smallest = min(sides.values())
        if smallest <= grid:
            continue
        out = {}
        for k, v in table.items():
            n = (sides[k] * grid // smallest) ** 2
            out[type(k)(n) if isinstance(k, str) else n] = min(int(v), n)
        d[f] = out


def _patch_grid(d: dict) -> int | None:
    """Patches per side of the first sub-config with an image size and a patch size."""
    for v in d.values():
        if (
            isinstance(v, dict)
            and _side(v.get("image_size"))
            and is_int(v.get("patch_size"))
            and v["patch_size"] > 0
        ):
            return _side(v["image_size"]) // v["patch_size"]
    return None
