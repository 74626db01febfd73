"""Shrink any transformers config to a tiny one with the same architecture.

What is kept: the layer pattern (sliding/global, MoE every k, hybrid attention/SSM, first-k-dense),
the query:key/value head ratio, experts per token, MLA, rope and rope-scaling type, nested
sub-configs (each shrunk by the same rules) and every rule the model enforces that the generic
rules know about. Field names and sizes live in data/shrink_rules.yaml.

Shrinking is tried at decreasing strength (``LEVELS``): a config the full rules break (a model
constraint no rule knows) falls back to a gentler level; the level used is recorded on the config
as ``_shrink_level`` so reports can say how faithful the tiny model is.

    >>> cfg = shrink_config({"model_type": "llama", "num_attention_heads": 32,
    ...                      "num_key_value_heads": 8})
    >>> cfg.num_attention_heads // cfg.num_key_value_heads
    4
"""

from __future__ import annotations

import copy
import math
from typing import Any

from agents import partial_config
from harness.build.rules import ShrinkRules, shrink_rules
from harness.build.shrink.budget import fit_budget
from harness.build.shrink.class_fields import (
    class_derived_fields,
    nest_flat_text_fields,
    recompute_class_derived,
    without_class_derived_attributes,
)
from harness.build.shrink.class_fields import (
    get_path as _get_path,
)
from harness.build.shrink.derived import keep_derived_widths
from harness.build.shrink.families import (
    shrink_experts,
    shrink_mla,
    shrink_modalities,
    shrink_patch_count_keys,
    shrink_ssm,
    shrink_windows,
    tie_image_sizes,
)
from harness.build.shrink.layer_ties import remap_foreign_indices, tie_layer_counts
from harness.build.shrink.layers import is_int, rescale_parts_keeping_ties, select_layers
from harness.build.shrink.tokens import apply_token_map, is_subconfig, refit_token_ids, token_map
from harness.errors import ShrinkError

#: Shrink strengths, strongest first.
LEVELS = ("full", "core", "layers")


# --------------------------------------------------------------------------- layers
def _layer_count_field(d: dict, r: ShrinkRules) -> str | None:
    for f in r.layer_count_fields:
        if is_int(d.get(f)) and d[f] > 0:
            return f
    # a per-layer list whose length is the layer count (nemotron_h: layers_block_type)
    for f in ("layers_block_type", "layer_types", "hybrid_override_pattern"):
        if isinstance(d.get(f), (list, str)) and d[f]:
            return None
    return None


def _shrink_layers(d: dict, r: ShrinkRules) -> None:
    t = r.targets
    field = _layer_count_field(d, r)
    n = d[field] if field else None
    if n is None:
        for f in ("layers_block_type", "layer_types"):  # count implied by a per-layer list
            if isinstance(d.get(f), list) and d[f]:
                n = len(d[f])
                break
    if n:
        taps = _feature_taps(d, r, n) if field else {}
        plan = select_layers(d, n, r, max([t.min_layers] + [len(v) for v in taps.values()]))
        for k, v in plan.updates.items():
            if v is None:
                d.pop(k, None)
            else:
                d[k] = v
        if field:
            d[field] = len(plan.keep)
        tie_layer_counts(d, r, n, len(plan.keep))
        for f, v in taps.items() if len(plan.keep) < n else ():
            # the same number of tapped layers, spread over the new stack (the last one kept)
            base, k, new_n = r.feature_taps[f], len(v), len(plan.keep)
            d[f] = [base + round((j + 1) * new_n / k) - 1 for j in range(k)]
    for f in r.extra_layer_count_fields:
        if is_int(d.get(f)) and d[f] > t.min_layers:
            d[f] = t.min_layers


def _feature_taps(d: dict, r: ShrinkRules, n: int) -> dict[str, list[int]]:
    """Lists of layers whose outputs a neck or head consumes one by one (DPT's
    `backbone_out_indices`, a ViT backbone's `out_indices`): the neck is built for that many
    features, so the shrunk stack keeps at least that many layers."""
    taps = {}
    for f, base in r.feature_taps.items():
        v = d.get(f)
        if isinstance(v, list) and len(v) > 1 and all(is_int(x) and base <= x < n + base for x in v):
            taps[f] = v
    return taps


# --------------------------------------------------------------------------- widths
def _heads(d: dict, r: ShrinkRules) -> tuple[int | None, dict[str, int]]:
    """New head counts of this level, keeping each q:kv ratio. Returns (query heads, updates)."""
    t = r.targets
    updates: dict[str, int] = {}
    q_heads = None
    for q, kv in r.head_pairs:
        if q in updates or not is_int(d.get(q)) or d[q] <= 0 or (kv and kv not in d):
            continue  # (a pair whose kv field the level lacks leaves q to the next pair: `[q, null]`)
        hq = d[q]
        hk = d.get(kv) if kv else None
        if is_int(hk) and 0 < hk < hq and hq % hk == 0:
            ratio = hq // hk
            new_kv = 1
            updates[q], updates[kv] = ratio * new_kv, new_kv
        elif is_int(hk) and hk == hq:
            updates[q] = updates[kv] = min(hq, t.base_heads)
        elif is_int(hk) and hk > 0:  # odd ratio (e.g. 3:2): keep both, just fewer
            g = math.gcd(hq, hk)
            updates[q], updates[kv] = hq // g, hk // g
        else:
            updates[q] = min(hq, t.base_heads)
        q_heads = q_heads or updates[q]
    return q_heads, updates


def _min_rope_head_dim(d: dict) -> int:
    """The smallest even head size whose rotary part (`partial_rotary_factor` of it) holds one
    pair per multimodal rope section (GLM-4V-MoE: 3 sections, half the head rotates: 12)."""
    rp = d.get("rope_parameters")
    if not isinstance(rp, dict):
        return 0
    sec = rp.get("mrope_section")
    prf = rp.get("partial_rotary_factor")
    if not (isinstance(sec, list) and sec):
        return 0
    share = prf if isinstance(prf, float) and 0 < prf < 1 else 1.0
    need = math.ceil(2 * len(sec) / share)
    return need + need % 2


def _shrink_rope(d: dict, head_dim: int, old_head_dim: int | None) -> None:
    """Keep rope type and scaling; rescale only what is tied to the head size (mrope sections)."""
    for key in ("rope_parameters", "rope_scaling"):
        rp = d.get(key)
        if not isinstance(rp, dict):
            continue
        inner = [rp] + [v for v in rp.values() if isinstance(v, dict)]
        for p in inner:
            prf = p.get("partial_rotary_factor", rp.get("partial_rotary_factor"))
            rotary = int(head_dim * prf) if isinstance(prf, float) and 0 < prf < 1 else head_dim
            for sk in ("mrope_section", "mrope_sections"):
                sec = p.get(sk)
                if isinstance(sec, list) and sec and all(is_int(x) for x in sec):
                    p[sk] = rescale_parts_keeping_ties(sec, max(len(sec), rotary // 2))
    if is_int(d.get("rotary_dim")) and old_head_dim:
        d["rotary_dim"] = max(2, 2 * round(d["rotary_dim"] * head_dim / old_head_dim / 2))


def _shrink_widths(d: dict, r: ShrinkRules, level: str, known: dict[int, int]) -> dict[int, int]:
    """Heads, hidden, head_dim, intermediate, experts, MLA, SSM. Returns {old hidden: new hidden}.

    `known` holds hidden sizes already shrunk in another sub-config: the same old width gets the
    same new width (a vision tower's output feeds the text model).
    """
    t = r.targets
    original = dict(d)
    q_heads, updates = _heads(d, r)
    hidden_map: dict[int, int] = {}
    hidden_field = next((f for f in r.hidden_fields if is_int(d.get(f)) and d[f] > 0), None)
    if q_heads is None and hidden_field is None:
        return hidden_map
    q_heads = q_heads or t.base_heads
    head_dim = max(t.head_dim if q_heads <= 4 else t.head_dim_many_heads, _min_rope_head_dim(d))
    new_hidden = max(t.min_hidden, q_heads * head_dim)
    if new_hidden % q_heads:
        new_hidden = q_heads * math.ceil(new_hidden / q_heads)
    old_hidden = d.get(hidden_field) if hidden_field else None
    if old_hidden in known and known[old_hidden] % q_heads == 0:
        new_hidden = known[old_hidden]
    if old_hidden is not None and old_hidden <= new_hidden:
        return hidden_map  # already tiny: leave widths alone
    d.update(updates)
    for q, kv in r.head_pairs:  # a default that leaves kv heads unset means "same as heads"
        if kv and kv in d and d[kv] is None and is_int(d.get(q)):
            d[kv] = d[q]
    old_head_dim = None
    for f in r.hidden_fields:
        if is_int(d.get(f)) and d[f] > new_hidden:
            hidden_map[d[f]] = new_hidden
            d[f] = new_hidden
    for f in r.head_dim_fields:
        if f in r.fill_none_head_dim and f in d and d[f] is None:
            d[f] = new_hidden // q_heads
        if is_int(d.get(f)) and d[f] > head_dim:
            old_head_dim = old_head_dim or d[f]
            d[f] = head_dim
    if old_head_dim is None and old_hidden:  # no explicit head size: hidden / heads (codegen, gptj)
        old_q = next((original[q] for q, _ in r.head_pairs if q in updates and is_int(original.get(q))), None)
        old_head_dim = old_hidden // old_q if old_q else None
    _shrink_rope(d, d.get("head_dim") if is_int(d.get("head_dim")) else new_hidden // q_heads, old_head_dim)
    inter = t.intermediate_multiplier * new_hidden
    for f in r.intermediate_fields:
        v = d.get(f)
        if is_int(v) and v > inter:
            d[f] = inter
        elif isinstance(v, list) and v and all(is_int(x) for x in v):
            d[f] = [min(x, inter) for x in v]
    if level == "full":
        shrink_experts(d, r, new_hidden)
        shrink_mla(d, r, original)
        shrink_ssm(d, r, new_hidden)
    return hidden_map


def _shrink_per_layer_overrides(
    d: dict, before: dict, r: ShrinkRules, level: str, known: dict[int, int]
) -> None:
    """Per-layer overrides (``per_layer_config``: {layer index: fields}) are the level's config for
    those layers: each is shrunk as the unshrunk level with its fields applied, by the same rules,
    and keeps the fields it names (Dots3's sliding layers: 64 heads, a 192-wide nope part, whose
    sum with the level's rope part is the level's head size)."""
    for k, v in d.items():
        if not (
            isinstance(k, str)
            and "layer" in k
            and isinstance(v, dict)
            and v
            and all(isinstance(e, dict) for e in v.values())
            and "model_type" not in v
        ):
            continue
        for entry in v.values():
            merged = {**before, **entry}
            _shrink_widths(merged, r, level, dict(known))
            for f in entry:
                entry[f] = merged.get(f, entry[f])


def _make_implicit_explicit(d: dict, r: ShrinkRules) -> None:
    """A default the modeling code hard-codes (mrope sections) becomes a config field to shrink."""
    mt = str(d.get("model_type") or "")
    rp = d.get("rope_parameters")
    if "vocab_size" not in d or not isinstance(rp, dict) or "mrope_section" in rp:
        return
    match = max((k for k in r.implicit_mrope_sections if mt.startswith(k)), key=len, default=None)
    if match:
        d["rope_parameters"] = {**rp, "mrope_section": list(r.implicit_mrope_sections[match])}


# --------------------------------------------------------------------------- driver
def shrink_dict(config: dict, level: str = "full") -> dict:
    """Pure dict -> dict shrink at one level (no validation)."""
    r = shrink_rules()
    d = copy.deepcopy(config)
    for f in r.drop_fields:
        d.pop(f, None)
    vocab = r.targets.vocab
    mapping = token_map(d, vocab, r)
    hidden_map: dict[int, int] = {}
    stage_map: dict[
        int, int
    ] = {}  # per-stage widths (CNN backbones), which other levels' channel lists follow

    def visit(level_dict: dict) -> None:
        _make_implicit_explicit(level_dict, r)
        before = dict(level_dict)
        for f in r.drop_fields:
            level_dict.pop(f, None)
        for k, v in r.force_fields.items():
            if k in level_dict:
                level_dict[k] = v
        _shrink_layers(level_dict, r)
        for f in r.vocab_fields:
            if f in level_dict and level_dict[f] is None and f in r.fill_none_vocab:
                level_dict[f] = vocab
            if is_int(level_dict.get(f)) and level_dict[f] > vocab:
                level_dict[f] = vocab
        if level in ("full", "core"):
            for old_h, new_h in _shrink_widths(level_dict, r, level, hidden_map).items():
                hidden_map.setdefault(old_h, new_h)
            _shrink_per_layer_overrides(level_dict, before, r, level, hidden_map)
        if level == "full":
            widths = shrink_modalities(level_dict, r)
            for old_w, new_w in widths.items():
                stage_map.setdefault(old_w, new_w)
            firsts = {
                v[0]
                for k, v in before.items()
                if k in r.stage_width_list_fields and isinstance(v, list) and v
            }
            for f in r.hidden_fields:  # the hidden size of a staged net is its first stage's width
                if is_int(before.get(f)) and before[f] in widths and before[f] in firsts:
                    level_dict[f] = hidden_map[before[f]] = widths[before[f]]
            for f, v in before.items():  # a stem's or neck's width that names a stage width
                if (
                    is_int(v)
                    and v in widths
                    and level_dict.get(f) == v
                    and any(f.endswith(sfx) for sfx in r.stage_width_tie_suffixes)
                ):
                    level_dict[f] = widths[v]
        shrink_windows(level_dict, r)
        level_dict["__touched__"] = {k for k in level_dict if before.get(k) != level_dict.get(k)}
        mt = level_dict.get("model_type")
        for k, v in r.overrides.get(mt, {}).items() if level == "full" else ():
            level_dict[k] = copy.deepcopy(v)
        for k, v in level_dict.items():
            if is_subconfig(k, v):
                visit(v)

    visit(d)
    apply_token_map(d, mapping, r)

    def finish(level_dict: dict) -> None:
        """A size that equalled some hidden size before must equal its shrunk value (projectors)."""
        touched = level_dict.pop("__touched__", set())
        for k in list(level_dict):
            v = level_dict[k]
            if is_subconfig(k, v):
                finish(v)
            elif (
                level == "full"
                and is_int(v)
                and k not in touched
                and v in hidden_map
                and any(k.endswith(sfx) for sfx in r.hidden_tie_suffixes)
                and not any(w in k for w in ("vocab", "token", "position", "image", "patch"))
            ):
                level_dict[k] = hidden_map[v]
            elif (
                level == "full"
                and is_int(v)
                and k not in touched
                and v in stage_map
                and any(k.endswith(sfx) for sfx in r.stage_width_scalar_tie_suffixes)
            ):
                level_dict[k] = stage_map[v]  # a head reading one backbone stage's features
            elif (
                level == "full"
                and k not in touched
                and isinstance(v, list)
                and v
                and all(is_int(x) for x in v)
                and any(k.endswith(sfx) for sfx in r.width_list_tie_suffixes)
            ):
                # channel lists that name widths shrunk elsewhere (a detector's encoder inputs are
                # the backbone's stage outputs, its decoder inputs the encoder's width)
                for widths in (hidden_map, stage_map):
                    if all(x in widths for x in v):
                        level_dict[k] = [widths[x] for x in v]
                        break

    finish(d)
    if level == "full":
        tie_image_sizes(config, d, r)
        shrink_patch_count_keys(d, r)
    remap_foreign_indices(config, d, r)
    if level == "full":
        keep_derived_widths(config, d, r)
        _apply_references(d, r)
    return d


def _apply_references(d: dict, r: ShrinkRules, depth: int = 0) -> None:
    """Overrides whose value is "=path.to.field" copy that (shrunk) field: cross-config ties. A
    wrapped whole-model config (ColQwen2's `vlm_config`, a qwen2_vl) keeps its own type's ties."""
    for path, ref in r.references.get(d.get("model_type"), {}).items():
        value = _get_path(d, ref)
        parent_path, _, key = path.rpartition(".")
        parent = _get_path(d, parent_path) if parent_path else d
        if value is not None and isinstance(parent, dict) and key in parent:
            parent[key] = value
    if depth < 2:
        for v in d.values():
            if isinstance(v, dict) and v.get("model_type") in r.references:
                _apply_references(v, r, depth + 1)


def full_config_dict(config: Any, model_type: str | None = None) -> tuple[str, dict]:
    """A partial config dict (or PretrainedConfig) -> (model_type, the full dict with defaults)."""
    from transformers import PretrainedConfig

    if isinstance(config, PretrainedConfig):
        return config.model_type, config.to_dict()
    cfg = dict(config or {})
    mt = model_type or cfg.get("model_type")
    if not mt:
        raise ValueError("config has no model_type and none was given")
    cfg.pop("model_type", None)
    r = shrink_rules()
    for f in r.drop_fields:
        cfg.pop(f, None)
    for k, v in r.required_fields.get(mt, {}).items():
        if cfg.get(k) is None:
            cfg[k] = copy.deepcopy(v)
    _replace_subconfigs(cfg, r)
    nest_flat_text_fields(cfg, config_class(mt))
    base = config_class(mt)(**cfg).to_dict()
    _replace_subconfigs(base, r)  # the type's defaults may name a timm backbone too (DETR)
    return mt, base


def _replace_subconfigs(d: dict, r: ShrinkRules) -> None:
    """Sub-configs that need a package we never install (timm) -> the transformers equivalent."""
    for k, v in list(d.items()):
        if isinstance(v, dict) and v.get("model_type") not in r.replace_subconfigs:
            _replace_subconfigs(v, r)  # nested levels too
        if not (isinstance(v, dict) and v.get("model_type") in r.replace_subconfigs):
            continue
        name = str(v.get("backbone") or v.get("architecture") or "")
        for prefix, replacement in r.replace_subconfigs[v["model_type"]].items():
            if name.startswith(prefix):
                d[k] = copy.deepcopy(replacement)
                break


def config_class(model_type: str):
    """agents.partial_config.config_class, raising for a type the installed transformers lacks."""
    cls = partial_config.config_class(model_type)
    if cls is None:
        raise KeyError(f"model_type {model_type!r} is unknown to the installed transformers")
    return cls


def _first_line(exc: BaseException) -> str:
    """The first non-blank line of an error (transformers' `requires_backends` starts with a newline)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")[:300]


def build_config(model_type: str, d: dict):
    cfg = dict(d)
    cfg.pop("model_type", None)
    return config_class(model_type)(**cfg)


def shrink_config(config: Any, model_type: str | None = None, *, validate=None):
    """Any config (dict, partial dict, PretrainedConfig) -> a tiny PretrainedConfig.

    `validate(config) -> None` (raises on failure) lets the caller also require that a model can
    be built from it; the strongest level that passes wins. Without it a level wins when the
    config class accepts it.
    """
    from agents.quiet import quiet_transformers

    with quiet_transformers():
        mt, full = full_config_dict(config, model_type)
        errors: dict[str, str] = {}
        derived = class_derived_fields(config_class(mt), full)
        for level in LEVELS:
            shrunk = shrink_dict(full, level)
            recompute_class_derived(full, shrunk, derived, config_class(mt))
            try:
                cfg = build_config(mt, shrunk)
                params = validate(cfg) if validate is not None else None
            except Exception as exc:  # noqa: BLE001 - a level the model rejects: try a gentler one
                errors[level] = f"{type(exc).__name__}: {_first_line(exc)}"
                continue
            changes: list[str] = []
            r = shrink_rules()
            budget = r.targets.max_parameters
            if isinstance(params, int) and params >= budget:
                without_class_derived_attributes(config_class(mt), shrunk)  # the class recomputes them
                shrunk, params, changes = fit_budget(
                    shrunk, lambda d: validate(build_config(mt, d)), budget, vocab_floor=r.targets.vocab
                )
                if changes and level == "full":  # halved widths: the cross-config ties hold again
                    _apply_references(shrunk, r)
                    params = validate(build_config(mt, shrunk))
                if refit_token_ids(shrunk, changes, r):
                    params = validate(build_config(mt, shrunk))
                cfg = build_config(mt, shrunk)
            cfg._shrink_level = level
            cfg._shrink_errors = errors
            cfg._shrink_budget_changes = changes
            cfg._shrink_parameters = params
            return cfg
    raise ShrinkError(mt, errors)
