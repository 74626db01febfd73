"""Architectural traits of a model config: a flat, typed record read from the config and the
transformers classes its model_type maps to.

Rules live in agents/data/traits.yaml. The expensive part, what a model_type is (its default config,
the head mappings that list it, facts read from its modeling source text), is computed once per type
(`TypeProfile`), kept in memory and on disk keyed by the transformers version, so classifying
100,000 configs costs a dict merge and a few lookups each. Nothing is instantiated per model.

A trait that cannot be told is "unknown", never a guess: when a config is incomplete (a listing
with only size fields, or no config.json at all) and the model_type lets a trait vary (its default
config has a key that changes it), that trait is unknown rather than the type's default.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from agents import type_profiles as _type_profiles
from agents.trait_rules import (
    first,
    has_lm_keys,
    head_of,
    layer_kinds,
    merged,
    modality,
    model_type_of,
    rule_activation,
    rule_attention,
    rule_attention_pattern,
    rule_dtype,
    rule_layer_mix,
    rule_moe,
    rule_norm,
    rule_position,
    rule_quantization,
    rule_rope_scaling,
    structure,
    text_key,
)
from agents.type_profiles import profiles
from agents.vocabulary import UNKNOWN, vocabulary

COMPLETE_LEVELS = {"full", "default", "file"}


@dataclass
class TraitRecord:
    """One config's traits. Every field is a string from traits.yaml's closed vocabulary (or unknown)."""

    model_type: str = UNKNOWN
    modality: str = UNKNOWN
    structure: str = UNKNOWN
    attention: str = UNKNOWN
    attention_pattern: str = UNKNOWN
    layer_mix: str = UNKNOWN
    position: str = UNKNOWN
    rope_scaling: str = UNKNOWN
    norm: str = UNKNOWN
    activation: str = UNKNOWN
    moe: str = UNKNOWN
    moe_experts: str = UNKNOWN
    moe_top_k: str = UNKNOWN
    tied_embeddings: str = UNKNOWN
    head: str = UNKNOWN
    dtype: str = UNKNOWN
    quantization: str = UNKNOWN

    def to_dict(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in TRAIT_NAMES}


TRAIT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(TraitRecord))


def reset_profiles() -> None:
    """Drop in-memory profiles and memos (after changing HARNESS_CACHE_DIR, or to time a cold run)."""
    _type_profiles.reset()
    _variable_in_defaults.cache_clear()
    _traits_cached.cache_clear()


# Traits a config states itself (never implied by the type): unknown unless the config is complete
# or carries the key.
_CONFIG_ONLY = {"tied_embeddings", "dtype", "quantization"}


@lru_cache(maxsize=4096)
def _variable_in_defaults(model_type: str, text_key: str | None) -> dict[str, tuple[tuple[str, ...], ...]]:
    profile = profiles().get(model_type)
    defaults = profile.defaults or {}
    tdefaults = defaults.get(text_key) if text_key and isinstance(defaults.get(text_key), dict) else {}
    out = {}
    for trait, groups in _variable_groups().items():
        out[trait] = tuple(g for g in groups if any(k in defaults or k in tdefaults for k in g))
    # layer_types only makes layer_mix vary when the type's own layers include non-attention kinds
    kinds = layer_kinds(tdefaults or defaults)
    if kinds is not None and kinds <= {"global", "local"}:
        out["layer_mix"] = tuple(g for g in out["layer_mix"] if g != ("layer_types",))
    return out


@lru_cache(maxsize=1)
def _variable_groups() -> dict[str, tuple[tuple[str, ...], ...]]:
    """variable_keys as alias groups (a bare key is a group of one)."""
    return {
        trait: tuple(g if isinstance(g, tuple) else (g,) for g in groups)
        for trait, groups in vocabulary().variable_keys.items()
    }


@lru_cache(maxsize=1)
def _all_variable_keys() -> dict[str, tuple[str, ...]]:
    return {t: tuple(k for g in groups for k in g) for t, groups in _variable_groups().items()}


def _undetermined(
    trait: str,
    cfg: Mapping[str, Any],
    tcfg: Mapping[str, Any],
    var: Mapping[str, tuple],
    complete: bool,
    known: bool,
) -> bool:
    """True when an incomplete config does not tell this trait and the type lets it vary."""
    if complete:
        return False
    keys = _all_variable_keys().get(trait, ())
    if trait in _CONFIG_ONLY:
        return not any(k in cfg or k in tcfg for k in keys)
    if not known:
        return not any(k in cfg or k in tcfg for k in keys) and trait not in ("position", "norm")
    return any(not any(k in cfg or k in tcfg for k in g) for g in var.get(trait, ()))


def extract_traits(
    config: Mapping[str, Any] | None,
    *,
    model_type: str | None = None,
    architectures: Iterable[str] | None = None,
    config_level: str | None = "file",
    head: str | None = None,
) -> TraitRecord:
    """Traits of one config. `config_level` says how complete the config is (full|default|file mean
    complete; partial|arch_only|None mean fields may be missing)."""
    cfg = dict(config or {})
    archs = list(architectures or cfg.get("architectures") or [])
    mt = model_type or cfg.get("model_type") or model_type_of(archs[0] if archs else None)
    if not isinstance(mt, str) or not mt:
        return TraitRecord(head=head_of(archs[0] if archs else None))
    profile = profiles().get(mt)
    if not profile.known and isinstance(cfg.get("model_type"), str) and cfg["model_type"] != mt:
        alt = profiles().get(cfg["model_type"])  # e.g. listing says phi-msft, config says phi
        if alt.known:
            profile = alt
    complete = config_level in COMPLETE_LEVELS
    defaults = profile.defaults or {}
    tkey = text_key(cfg, defaults)
    eff = merged(defaults, cfg)
    tcfg = cfg.get(tkey) if tkey and isinstance(cfg.get(tkey), dict) else {}
    if tkey:
        tdef = defaults.get(tkey) if isinstance(defaults.get(tkey), dict) else {}
        if not tcfg and has_lm_keys(cfg):
            tcfg = cfg  # a flat text-only config of a multimodal type (e.g. a ...ForCausalLM checkpoint)
        t = merged(tdef, tcfg)
    else:
        t = eff
    var = _variable_in_defaults(profile.model_type, tkey) if profile.known else {}
    rec = TraitRecord(model_type=mt)
    rec.head = head_of(archs[0]) if archs else (head or UNKNOWN)
    overrides = vocabulary().type_overrides.get(profile.model_type, {}) if profile.known else {}

    def undetermined(trait: str) -> bool:
        return trait not in overrides and _undetermined(trait, cfg, tcfg, var, complete, profile.known)

    attention = overrides.get("attention") or rule_attention(t, profile)
    rec.attention = UNKNOWN if undetermined("attention") else attention
    layer_mix = overrides.get("layer_mix") or rule_layer_mix(t, attention)
    rec.layer_mix = UNKNOWN if undetermined("layer_mix") else layer_mix
    pattern = overrides.get("attention_pattern") or rule_attention_pattern(t, attention, layer_mix)
    rec.attention_pattern = UNKNOWN if undetermined("attention_pattern") else pattern
    position = overrides.get("position") or rule_position(t, profile, layer_mix)
    rec.position = UNKNOWN if undetermined("position") else position
    rope = rule_rope_scaling(t, rec.position)
    if rec.position == "rope" and "rope_scaling" in overrides:
        rope = overrides["rope_scaling"]
    rec.rope_scaling = UNKNOWN if undetermined("rope_scaling") else rope
    rec.norm = overrides.get("norm") or rule_norm(t, profile)
    rec.activation = UNKNOWN if undetermined("activation") else rule_activation(t)
    moe, n_exp, top_k = rule_moe(t)
    rec.moe = UNKNOWN if undetermined("moe") else moe
    rec.moe_experts = UNKNOWN if undetermined("moe_experts") else n_exp
    rec.moe_top_k = UNKNOWN if undetermined("moe_top_k") else top_k
    if rec.moe == UNKNOWN:
        rec.moe_experts = rec.moe_top_k = UNKNOWN
    tied = eff.get("tie_word_embeddings", t.get("tie_word_embeddings"))
    rec.tied_embeddings = ("tied" if tied else "untied") if isinstance(tied, bool) else UNKNOWN
    if undetermined("tied_embeddings"):
        rec.tied_embeddings = UNKNOWN
    rec.dtype = rule_dtype(first(cfg, ("torch_dtype", "dtype")) or first(tcfg, ("torch_dtype", "dtype")))
    qc = cfg.get("quantization_config") or tcfg.get("quantization_config")
    rec.quantization = UNKNOWN if undetermined("quantization") else rule_quantization(qc)
    rec.modality = modality(eff, profile, rec.head, complete)
    rec.structure = structure(eff, profile, rec.head, layer_mix if rec.layer_mix != UNKNOWN else "attention")
    if rec.layer_mix == UNKNOWN and rec.structure != "encoder-decoder" and _may_be_hybrid(var):
        rec.structure = UNKNOWN  # the type allows hybrid stacks and we cannot see which layers it has
    return rec


def _may_be_hybrid(var: Mapping[str, tuple]) -> bool:
    return any(
        k in ("layers_block_type", "hybrid_override_pattern", "attn_layer_period", "block_types")
        for g in var.get("layer_mix", ())
        for k in g
    )


def parse_config(text: str | None) -> dict[str, Any] | None:
    """A config JSON text as a dict; None when absent or not a JSON object."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def traits_for_row(row: Mapping[str, Any]) -> TraitRecord:
    """Traits of one crawl-store row (id, model_type, architectures, config JSON, config_level, head)."""
    return TraitRecord(**traits_dict_for_row(row))


def traits_dict_for_row(row: Mapping[str, Any]) -> dict[str, str]:
    """traits_for_row as a plain dict (the fast path for whole stores).

    Rows that share (model_type, config text, architectures, level, head), common in a real
    population of fine-tunes, are classified once (the result is copied, not shared)."""
    config = row.get("config")
    if isinstance(config, dict):
        config = json.dumps(config, sort_keys=True)
    config = config if isinstance(config, str) else None
    archs = row.get("architectures")
    archs = tuple(archs) if archs is not None and not isinstance(archs, str) else ()
    mt = row.get("model_type")
    mt = mt if isinstance(mt, str) and mt else None
    level = row.get("config_level")
    level = level if isinstance(level, str) else None
    head = row.get("head") if isinstance(row.get("head"), str) else None
    return dict(_traits_cached(mt, config, archs, level, head))


@lru_cache(maxsize=200_000)
def _traits_cached(
    mt: str | None, config: str | None, archs: tuple[str, ...], level: str | None, head: str | None
) -> dict[str, str]:
    cfg = parse_config(config)
    return extract_traits(cfg, model_type=mt, architectures=archs, config_level=level, head=head).to_dict()


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a config.json (a clear ValueError when it is not a JSON object)."""
    text = Path(path).read_text()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: a config.json must be a JSON object, got {type(value).__name__}")
    return value
