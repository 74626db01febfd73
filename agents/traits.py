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
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

UNKNOWN = "unknown"
COMPLETE_LEVELS = {"full", "default", "file"}


@lru_cache(maxsize=1)
def vocabulary() -> dict[str, Any]:
    """The trait vocabulary and rule tables (agents/data/traits.yaml)."""
    text = resources.files("agents").joinpath("data", "traits.yaml").read_text()
    return yaml.safe_load(text)


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

    def unknown_traits(self) -> list[str]:
        return [k for k, v in self.to_dict().items() if v == UNKNOWN]


TRAIT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(TraitRecord))


def allowed_values(trait: str) -> set[str] | None:
    """The closed value set of a trait (with unknown), or None for open traits (model_type, head)."""
    spec = vocabulary()["traits"][trait]
    if spec["values"] == "open":
        return None
    return {str(v) for v in spec["values"]} | {UNKNOWN}


from agents import type_profiles as _type_profiles  # noqa: E402 - after vocabulary(), which it uses
from agents.type_profiles import TypeProfile, cache_dir, profiles  # noqa: E402,F401 - re-exported


def reset_profiles() -> None:
    """Drop in-memory profiles and memos (after changing HARNESS_CACHE_DIR, or to time a cold run)."""
    _type_profiles.reset()
    _variable_in_defaults.cache_clear()
    _traits_cached.cache_clear()



# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------


class _Eff(dict):
    """A config merged over its type's defaults that remembers the raw config: key lists are
    looked up in the raw config first, so an alias the config uses beats a default's other alias."""

    raw: Mapping[str, Any] = {}


def _merged(defaults: Mapping[str, Any], raw: Mapping[str, Any]) -> _Eff:
    eff = _Eff(defaults)
    eff.update(raw)
    eff.raw = raw
    return eff


def _first(d: Mapping[str, Any], keys: Iterable[str]) -> Any:
    keys = tuple(keys)
    raw = getattr(d, "raw", None)
    if raw:
        for k in keys:
            v = raw.get(k)
            if v is not None:
                return v
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


def _as_int(v: Any) -> int | None:
    if isinstance(v, list) and v:
        v = v[0]
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return int(v)
    return None


def _text_key(cfg: Mapping[str, Any], defaults: Mapping[str, Any]) -> str | None:
    for k in vocabulary()["keys"]["text_subconfig"]:
        if isinstance(cfg.get(k), dict) or isinstance(defaults.get(k), dict):
            return k
    return None


@lru_cache(maxsize=1)
def _lookup_tables() -> dict[str, dict[str, str]]:
    v = vocabulary()

    def invert(table: dict[str, list]) -> dict[str, str]:
        return {str(alias).lower(): value for value, aliases in table.items() for alias in aliases}

    return {
        "activation": invert(v["activation_families"]),
        "dtype": invert(v["dtype_values"]),
        "quant": invert(v["quantization_methods"]),
        "rope": invert(v["rope_types"]),
    }


@lru_cache(maxsize=1)
def _class_heads() -> dict[str, str]:
    """transformers class name -> head name (agents/catalog_heads.yaml priority)."""
    from agents.catalog import entries

    priority = vocabulary()["head_priority"]
    out = {}
    for e in entries():  # head_priority first, then the bare model, then catalog order
        names = [h.head for h in e.heads]
        preferred = [h for h in priority if h in names] + (["base"] if "base" in names else []) + names
        out[e.architecture] = preferred[0]
    return out


def model_type_of(architecture: str | None) -> str | None:
    """The one model_type whose head mappings list this class (None when none or several do)."""
    if not architecture:
        return None
    from agents.catalog import architecture_index

    types = architecture_index().get(architecture, ())
    return types[0] if len(types) == 1 else None


def head_of(architecture: str | None) -> str:
    if not architecture:
        return UNKNOWN
    head = _class_heads().get(architecture)
    if head:
        return head
    for suffix, name in vocabulary()["class_suffix_heads"].items():
        if architecture.endswith(suffix):
            return name
    return UNKNOWN


def _layer_kinds(t: Mapping[str, Any]) -> set[str] | None:
    v = vocabulary()
    kinds_table = v["layer_kinds"]
    for key in ("layer_types", "layers_block_type", "block_types", "attention_types", "attention_layers"):
        seq = t.get(key)
        if isinstance(seq, list) and seq:
            flat: list[Any] = []
            for item in seq:  # gpt_neo writes [[["global", "local"], 12]]
                flat.extend(item[0] if isinstance(item, list) and item and isinstance(item[0], list) else [item])
            kinds = {kinds_table.get(str(x).lower(), "other") for x in flat if isinstance(x, str)}
            kinds.discard("mlp")
            if kinds:
                return kinds
    pattern = t.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        kinds = {v["pattern_chars"].get(ch, "other") for ch in pattern}
        kinds.discard("mlp")
        return kinds
    if t.get("attn_layer_period") or t.get("attn_layer_indices"):
        return {"global", "ssm"}
    return None


def _rule_layer_mix(t: Mapping[str, Any], attention: str) -> str:
    kinds = _layer_kinds(t)
    if kinds is None:
        if attention == "none":
            return UNKNOWN
        return "attention" if attention != UNKNOWN else UNKNOWN
    has_attn = bool(kinds & {"global", "local"})
    for other in ("ssm", "linear", "recurrent", "conv"):
        if other in kinds:
            return f"attention+{other}" if has_attn else other
    return "attention" if has_attn else UNKNOWN


def _rule_attention(t: Mapping[str, Any], profile: TypeProfile) -> str:
    keys = vocabulary()["keys"]
    if t.get("kv_lora_rank"):
        return "mla"
    heads = _as_int(_first(t, keys["heads"]))
    if heads is None:
        if profile.known and profile.source_has_attention is False:
            return "none"
        return UNKNOWN
    if t.get("multi_query") is True:
        return "mqa"
    kv = _as_int(_first(t, keys["kv_heads"]))
    if kv is None and not profile.known:
        return UNKNOWN  # custom code: a missing kv-head count proves nothing
    if kv is None or kv <= 0 or kv >= heads:
        return "mha"
    if kv == 1:
        return "mqa"
    ratio = heads / kv
    if ratio <= 2:
        return "gqa-2"
    if ratio <= 4:
        return "gqa-4"
    if ratio <= 8:
        return "gqa-8"
    return "gqa-16+"


def _rule_attention_pattern(t: Mapping[str, Any], attention: str, layer_mix: str) -> str:
    if attention == "none" or layer_mix in ("ssm", "recurrent", "linear"):
        return "n/a"
    kinds = _layer_kinds(t) or set()
    if "local" in kinds and "global" in kinds:
        return "local_global"
    if "local" in kinds:
        return "sliding"
    for key in ("sliding_window_pattern", "_sliding_window_pattern"):
        if isinstance(t.get(key), int) and t[key] > 1 and t.get("sliding_window"):
            return "local_global"
    if t.get("attention_chunk_size"):
        return "local_global"
    if "global" in kinds and t.get("layer_types"):
        return "global"  # layer_types is authoritative when present
    if t.get("use_sliding_window") is False:
        return "global"
    if t.get("sliding_window") or t.get("attention_window") or t.get("sliding_window_size"):
        return "sliding"
    return "global"


_ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta", "rotary_dim", "rotary_pct", "partial_rotary_factor",
              "rotary_emb_base", "rope_interleave", "qk_rope_head_dim", "rotary_embedding_base")


def _rule_position(t: Mapping[str, Any], profile: TypeProfile, layer_mix: str) -> str:
    if t.get("alibi") is True or t.get("use_alibi") is True:
        return "alibi"
    pet = t.get("position_embedding_type") or t.get("position_embeddings_type")
    if isinstance(pet, str):
        pet = pet.lower()
        if pet.startswith("relative"):
            return "relative"
        if pet in ("rotary", "rope"):
            return "rope"
        if pet == "alibi":
            return "alibi"
    if any(t.get(k) not in (None, {}, 0) for k in _ROPE_KEYS):
        return "rope"
    if t.get("relative_attention_num_buckets") or t.get("relative_attention") is True or t.get("max_relative_positions"):
        return "relative"
    if isinstance(pet, str) and pet == "absolute":
        return "absolute"
    if layer_mix in ("ssm", "recurrent"):
        return "none"
    if profile.source_position and len(profile.source_position) == 1:
        return profile.source_position[0]
    return UNKNOWN


def _rule_rope_scaling(t: Mapping[str, Any], position: str) -> str:
    if position != "rope":
        return "n/a" if position != UNKNOWN else UNKNOWN
    rp = t.get("rope_scaling")
    if not isinstance(rp, dict):
        rp = t.get("rope_parameters")
    if not isinstance(rp, dict):
        return "none"
    candidates = [rp] + [v for v in rp.values() if isinstance(v, dict)]  # per-layer-type parameters
    table = _lookup_tables()["rope"]
    found = "none"
    for d in candidates:
        kind = d.get("rope_type") or d.get("type")
        if "mrope_section" in d and kind in (None, "default"):
            kind = "mrope"
        if kind is None and "rope_theta" in d and d is not rp:
            kind = "default"
        if kind is None:
            continue
        value = table.get(str(kind).lower(), "other")
        if value != "none":
            return value
    return found


def _rule_norm(t: Mapping[str, Any], profile: TypeProfile) -> str:
    if t.get("rms_norm_eps") is not None or t.get("rmsnorm") is True or t.get("use_rms_norm") is True:
        return "rmsnorm"
    src = profile.source_norm or []
    if len(src) == 1:
        return src[0]
    if _first(t, vocabulary()["keys"]["ln_eps"]) is not None and "layernorm" in src:
        return "layernorm"
    return UNKNOWN


def _rule_activation(t: Mapping[str, Any]) -> str:
    value = _first(t, vocabulary()["keys"]["activation"])
    if not isinstance(value, str):
        return UNKNOWN
    return _lookup_tables()["activation"].get(value.lower(), "other")


def _bucket(n: int, edges: list[tuple[int, str]], last: str) -> str:
    for edge, name in edges:
        if n <= edge:
            return name
    return last


def _rule_moe(t: Mapping[str, Any]) -> tuple[str, str, str]:
    keys = vocabulary()["keys"]
    experts = _as_int(_first(t, keys["experts"]))
    if not experts or experts <= 1:
        return "dense", "n/a", "n/a"
    shared = _as_int(_first(t, keys["shared_experts"])) or 0
    shared_size = _as_int(_first(t, keys["shared_expert_size"])) or 0
    moe = "moe+shared" if shared > 0 or shared_size > 0 else "moe"
    n = _bucket(experts, [(8, "2-8"), (64, "9-64"), (256, "65-256")], "257+")
    k = _as_int(_first(t, keys["top_k"]))
    top_k = UNKNOWN if not k else _bucket(k, [(1, "1"), (2, "2"), (4, "3-4"), (8, "5-8")], "9+")
    return moe, n, top_k


def _rule_quantization(qc: Any) -> str:
    if not isinstance(qc, dict):
        return "none"
    method = str(qc.get("quant_method") or "").lower()
    algo = str(qc.get("quant_algo") or "").lower()
    if method == "modelopt" and "fp8" in algo:
        return "fp8"
    if "nvfp4" in algo:
        return "nvfp4"
    if not method and algo:
        method = algo
    return _lookup_tables()["quant"].get(method, "other")


def _rule_dtype(value: Any) -> str:
    if not isinstance(value, str):
        return UNKNOWN
    return _lookup_tables()["dtype"].get(value.lower().removeprefix("torch."), "other")


_NON_TEXT_SUBCONFIGS = ("vision_config", "audio_config", "speech_config", "visual", "vision_tower", "image_config")


def _modality(cfg: Mapping[str, Any], profile: TypeProfile, head: str, complete: bool) -> str:
    raw = getattr(cfg, "raw", cfg)
    if profile.known and profile.mappings:
        names = set(profile.mappings)
        for value, mappings in vocabulary()["modality_from_heads"]:
            if names & set(mappings):
                if value == "multimodal" and complete and _has_lm_keys(raw) and not any(
                        isinstance(raw.get(k), dict) for k in _NON_TEXT_SUBCONFIGS):
                    return "text"  # a text-only checkpoint of a multimodal family
                return value
    has_text = any(isinstance(cfg.get(k), dict) for k in ("text_config", "language_config", "llm_config"))
    has_other = any(isinstance(cfg.get(k), dict) for k in ("vision_config", "audio_config", "speech_config"))
    if has_text and has_other:
        return "multimodal"
    if head in ("causal_lm", "masked_lm", "seq2seq_lm", "sequence_classification", "token_classification",
                "question_answering"):
        return "text"
    if head in ("image_classification", "object_detection"):
        return "vision"
    if head in ("ctc", "audio_classification", "speech_seq2seq"):
        return "audio"
    return UNKNOWN


_DECODER_MAPS = {"MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
                 "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES"}
_SEQ2SEQ_MAPS = {"MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"}
_ENCODER_MAPS = {"MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
                 "MODEL_FOR_CTC_MAPPING_NAMES", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
                 "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
                 "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES", "MODEL_FOR_IMAGE_MAPPING_NAMES",
                 "MODEL_FOR_BACKBONE_MAPPING_NAMES", "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
                 "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES", "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
                 "MODEL_FOR_TIME_SERIES_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES"}


def _structure(cfg: Mapping[str, Any], profile: TypeProfile, head: str, layer_mix: str) -> str:
    if layer_mix.startswith("attention+"):
        return "hybrid"
    if cfg.get("is_encoder_decoder") is True:
        return "encoder-decoder"
    names = set(profile.mappings or [])
    if names & _SEQ2SEQ_MAPS:
        return "encoder-decoder"
    if names & _DECODER_MAPS and "MODEL_FOR_MASKED_LM_MAPPING_NAMES" not in names:
        return "decoder"
    if names & _ENCODER_MAPS:
        return "encoder"
    if head in ("causal_lm", "image_text_to_text"):
        return "decoder"
    if head in ("seq2seq_lm", "speech_seq2seq"):
        return "encoder-decoder"
    if head in ("masked_lm", "ctc", "image_classification"):
        return "encoder"
    if layer_mix in ("ssm", "recurrent", "linear"):
        return "decoder"
    return UNKNOWN


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
    kinds = _layer_kinds(tdefaults or defaults)
    if kinds is not None and kinds <= {"global", "local"}:
        out["layer_mix"] = tuple(g for g in out["layer_mix"] if g != ("layer_types",))
    return out


@lru_cache(maxsize=1)
def _variable_groups() -> dict[str, tuple[tuple[str, ...], ...]]:
    """variable_keys as alias groups (a bare key is a group of one)."""
    return {trait: tuple(tuple(g) if isinstance(g, list) else (g,) for g in groups)
            for trait, groups in vocabulary()["variable_keys"].items()}


@lru_cache(maxsize=1)
def _all_variable_keys() -> dict[str, tuple[str, ...]]:
    return {t: tuple(k for g in groups for k in g) for t, groups in _variable_groups().items()}


def _undetermined(trait: str, cfg: Mapping[str, Any], tcfg: Mapping[str, Any], var: Mapping[str, tuple],
                  complete: bool, known: bool) -> bool:
    """True when an incomplete config does not tell this trait and the type lets it vary."""
    if complete:
        return False
    keys = _all_variable_keys().get(trait, ())
    if trait in _CONFIG_ONLY:
        return not any(k in cfg or k in tcfg for k in keys)
    if not known:
        return not any(k in cfg or k in tcfg for k in keys) and trait not in ("position", "norm")
    return any(not any(k in cfg or k in tcfg for k in g) for g in var.get(trait, ()))


def extract_traits(config: Mapping[str, Any] | None, *, model_type: str | None = None,
                   architectures: Iterable[str] | None = None, config_level: str | None = "file",
                   head: str | None = None) -> TraitRecord:
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
    tkey = _text_key(cfg, defaults)
    eff = _merged(defaults, cfg)
    tcfg = cfg.get(tkey) if tkey and isinstance(cfg.get(tkey), dict) else {}
    if tkey:
        tdef = defaults.get(tkey) if isinstance(defaults.get(tkey), dict) else {}
        if not tcfg and _has_lm_keys(cfg):
            tcfg = cfg  # a flat text-only config of a multimodal type (e.g. a ...ForCausalLM checkpoint)
        t = _merged(tdef, tcfg)
    else:
        t = eff
    var = _variable_in_defaults(profile.model_type, tkey) if profile.known else {}
    rec = TraitRecord(model_type=mt)
    rec.head = head_of(archs[0]) if archs else (head or UNKNOWN)
    overrides = vocabulary()["type_overrides"].get(profile.model_type, {}) if profile.known else {}

    def undetermined(trait: str) -> bool:
        return trait not in overrides and _undetermined(trait, cfg, tcfg, var, complete, profile.known)

    attention = overrides.get("attention") or _rule_attention(t, profile)
    rec.attention = UNKNOWN if undetermined("attention") else attention
    layer_mix = overrides.get("layer_mix") or _rule_layer_mix(t, attention)
    rec.layer_mix = UNKNOWN if undetermined("layer_mix") else layer_mix
    pattern = overrides.get("attention_pattern") or _rule_attention_pattern(t, attention, layer_mix)
    rec.attention_pattern = UNKNOWN if undetermined("attention_pattern") else pattern
    position = overrides.get("position") or _rule_position(t, profile, layer_mix)
    rec.position = UNKNOWN if undetermined("position") else position
    rope = _rule_rope_scaling(t, rec.position)
    if rec.position == "rope" and "rope_scaling" in overrides:
        rope = overrides["rope_scaling"]
    rec.rope_scaling = UNKNOWN if undetermined("rope_scaling") else rope
    rec.norm = overrides.get("norm") or _rule_norm(t, profile)
    rec.activation = UNKNOWN if undetermined("activation") else _rule_activation(t)
    moe, n_exp, top_k = _rule_moe(t)
    rec.moe = UNKNOWN if undetermined("moe") else moe
    rec.moe_experts = UNKNOWN if undetermined("moe_experts") else n_exp
    rec.moe_top_k = UNKNOWN if undetermined("moe_top_k") else top_k
    if rec.moe == UNKNOWN:
        rec.moe_experts = rec.moe_top_k = UNKNOWN
    tied = eff.get("tie_word_embeddings", t.get("tie_word_embeddings"))
    rec.tied_embeddings = ("tied" if tied else "untied") if isinstance(tied, bool) else UNKNOWN
    if undetermined("tied_embeddings"):
        rec.tied_embeddings = UNKNOWN
    rec.dtype = _rule_dtype(_first(cfg, ("torch_dtype", "dtype")) or _first(tcfg, ("torch_dtype", "dtype")))
    qc = cfg.get("quantization_config") or tcfg.get("quantization_config")
    rec.quantization = UNKNOWN if undetermined("quantization") else _rule_quantization(qc)
    rec.modality = _modality(eff, profile, rec.head, complete)
    rec.structure = _structure(eff, profile, rec.head, layer_mix if rec.layer_mix != UNKNOWN else "attention")
    if rec.layer_mix == UNKNOWN and rec.structure != "encoder-decoder" and _may_be_hybrid(var):
        rec.structure = UNKNOWN  # the type allows hybrid stacks and we cannot see which layers it has
    return rec


def _has_lm_keys(cfg: Mapping[str, Any]) -> bool:
    keys = vocabulary()["keys"]
    return any(k in cfg for k in keys["heads"]) or "num_hidden_layers" in cfg


def _may_be_hybrid(var: Mapping[str, tuple]) -> bool:
    return any(k in ("layers_block_type", "hybrid_override_pattern", "attn_layer_period", "block_types")
               for g in var.get("layer_mix", ()) for k in g)


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
def _traits_cached(mt: str | None, config: str | None, archs: tuple[str, ...], level: str | None,
                   head: str | None) -> dict[str, str]:
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
