"""The per-trait rules of agents.traits: each reads the merged config (the type's defaults
overlaid with the model's own keys) and the type's profile, and returns a value from
agents/data/traits.yaml's closed vocabulary, or unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from agents.type_profiles import TypeProfile
from agents.vocabulary import UNKNOWN, vocabulary


class _Eff(dict):
    """A config merged over its type's defaults that remembers the raw config: key lists are
    looked up in the raw config first, so an alias the config uses beats a default's other alias."""

    raw: Mapping[str, Any] = {}


def merged(defaults: Mapping[str, Any], raw: Mapping[str, Any]) -> _Eff:
    eff = _Eff(defaults)
    eff.update(raw)
    eff.raw = raw
    return eff


def first(d: Mapping[str, Any], keys: Iterable[str]) -> Any:
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


def text_key(cfg: Mapping[str, Any], defaults: Mapping[str, Any]) -> str | None:
    for k in vocabulary().keys.text_subconfig:
        if isinstance(cfg.get(k), dict) or isinstance(defaults.get(k), dict):
            return k
    return None


@lru_cache(maxsize=1)
def _lookup_tables() -> dict[str, dict[str, str]]:
    v = vocabulary()

    def invert(table: Mapping[str, Sequence[str | None]]) -> dict[str, str]:
        return {str(alias).lower(): value for value, aliases in table.items() for alias in aliases}

    return {
        "activation": invert(v.activation_families),
        "dtype": invert(v.dtype_values),
        "quant": invert(v.quantization_methods),
        "rope": invert(v.rope_types),
    }


@lru_cache(maxsize=1)
def _class_heads() -> dict[str, str]:
    """transformers class name -> head name (agents/catalog_heads.yaml priority)."""
    from agents.catalog import entries

    priority = vocabulary().head_priority
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
    for suffix, name in vocabulary().class_suffix_heads.items():
        if architecture.endswith(suffix):
            return name
    return UNKNOWN


def layer_kinds(t: Mapping[str, Any]) -> set[str] | None:
    v = vocabulary()
    kinds_table = v.layer_kinds
    for key in ("layer_types", "layers_block_type", "block_types", "attention_types", "attention_layers"):
        seq = t.get(key)
        if isinstance(seq, list) and seq:
            flat: list[Any] = []
            for item in seq:  # gpt_neo writes [[["global", "local"], 12]]
                flat.extend(
                    item[0] if isinstance(item, list) and item and isinstance(item[0], list) else [item]
                )
            kinds = {kinds_table.get(str(x).lower(), "other") for x in flat if isinstance(x, str)}
            kinds.discard("mlp")
            if kinds:
                return kinds
    pattern = t.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        kinds = {v.pattern_chars.get(ch, "other") for ch in pattern}
        kinds.discard("mlp")
        return kinds
    if t.get("attn_layer_period") or t.get("attn_layer_indices"):
        return {"global", "ssm"}
    return None


def rule_layer_mix(t: Mapping[str, Any], attention: str) -> str:
    kinds = layer_kinds(t)
    if kinds is None:
        if attention == "none":
            return UNKNOWN
        return "attention" if attention != UNKNOWN else UNKNOWN
    has_attn = bool(kinds & {"global", "local"})
    for other in ("ssm", "linear", "recurrent", "conv"):
        if other in kinds:
            return f"attention+{other}" if has_attn else other
    return "attention" if has_attn else UNKNOWN


def rule_attention(t: Mapping[str, Any], profile: TypeProfile) -> str:
    keys = vocabulary().keys
    if t.get("kv_lora_rank"):
        return "mla"
    heads = _as_int(first(t, keys.heads))
    if heads is None:
        if profile.known and profile.source_has_attention is False:
            return "none"
        return UNKNOWN
    if t.get("multi_query") is True:
        return "mqa"
    kv = _as_int(first(t, keys.kv_heads))
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


def rule_attention_pattern(t: Mapping[str, Any], attention: str, layer_mix: str) -> str:
    if attention == "none" or layer_mix in ("ssm", "recurrent", "linear"):
        return "n/a"
    kinds = layer_kinds(t) or set()
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


_ROPE_KEYS = (
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "rotary_dim",
    "rotary_pct",
    "partial_rotary_factor",
    "rotary_emb_base",
    "rope_interleave",
    "qk_rope_head_dim",
    "rotary_embedding_base",
)


def rule_position(t: Mapping[str, Any], profile: TypeProfile, layer_mix: str) -> str:
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
    if (
        t.get("relative_attention_num_buckets")
        or t.get("relative_attention") is True
        or t.get("max_relative_positions")
    ):
        return "relative"
    if isinstance(pet, str) and pet == "absolute":
        return "absolute"
    if layer_mix in ("ssm", "recurrent"):
        return "none"
    if profile.source_position and len(profile.source_position) == 1:
        return profile.source_position[0]
    return UNKNOWN


def rule_rope_scaling(t: Mapping[str, Any], position: str) -> str:
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


def rule_norm(t: Mapping[str, Any], profile: TypeProfile) -> str:
    if t.get("rms_norm_eps") is not None or t.get("rmsnorm") is True or t.get("use_rms_norm") is True:
        return "rmsnorm"
    src = profile.source_norm or []
    if len(src) == 1:
        return src[0]
    if first(t, vocabulary().keys.ln_eps) is not None and "layernorm" in src:
        return "layernorm"
    return UNKNOWN


def rule_activation(t: Mapping[str, Any]) -> str:
    value = first(t, vocabulary().keys.activation)
    if not isinstance(value, str):
        return UNKNOWN
    return _lookup_tables()["activation"].get(value.lower(), "other")


def _bucket(n: int, edges: list[tuple[int, str]], last: str) -> str:
    for edge, name in edges:
        if n <= edge:
            return name
    return last


def rule_moe(t: Mapping[str, Any]) -> tuple[str, str, str]:
    keys = vocabulary().keys
    experts = _as_int(first(t, keys.experts))
    if not experts or experts <= 1:
        return "dense", "n/a", "n/a"
    shared = _as_int(first(t, keys.shared_experts)) or 0
    shared_size = _as_int(first(t, keys.shared_expert_size)) or 0
    moe = "moe+shared" if shared > 0 or shared_size > 0 else "moe"
    n = _bucket(experts, [(8, "2-8"), (64, "9-64"), (256, "65-256")], "257+")
    k = _as_int(first(t, keys.top_k))
    top_k = UNKNOWN if not k else _bucket(k, [(1, "1"), (2, "2"), (4, "3-4"), (8, "5-8")], "9+")
    return moe, n, top_k


def rule_quantization(qc: Any) -> str:
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


def rule_dtype(value: Any) -> str:
    if not isinstance(value, str):
        return UNKNOWN
    return _lookup_tables()["dtype"].get(value.lower().removeprefix("torch."), "other")


_NON_TEXT_SUBCONFIGS = (
    "vision_config",
    "audio_config",
    "speech_config",
    "visual",
    "vision_tower",
    "image_config",
)


def modality(cfg: Mapping[str, Any], profile: TypeProfile, head: str, complete: bool) -> str:
    raw = getattr(cfg, "raw", cfg)
    if profile.known and profile.mappings:
        names = set(profile.mappings)
        for value, mappings in vocabulary().modality_from_heads:
            if names & set(mappings):
                if (
                    value == "multimodal"
                    and complete
                    and has_lm_keys(raw)
                    and not any(isinstance(raw.get(k), dict) for k in _NON_TEXT_SUBCONFIGS)
                ):
                    return "text"  # a text-only checkpoint of a multimodal family
                return value
    has_text = any(isinstance(cfg.get(k), dict) for k in ("text_config", "language_config", "llm_config"))
    has_other = any(isinstance(cfg.get(k), dict) for k in ("vision_config", "audio_config", "speech_config"))
    if has_text and has_other:
        return "multimodal"
    if head in (
        "causal_lm",
        "masked_lm",
        "seq2seq_lm",
        "sequence_classification",
        "token_classification",
        "question_answering",
    ):
        return "text"
    if head in ("image_classification", "object_detection"):
        return "vision"
    if head in ("ctc", "audio_classification", "speech_seq2seq"):
        return "audio"
    return UNKNOWN


_DECODER_MAPS = {
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
}
_SEQ2SEQ_MAPS = {"MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"}
_ENCODER_MAPS = {
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_CTC_MAPPING_NAMES",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_MAPPING_NAMES",
    "MODEL_FOR_BACKBONE_MAPPING_NAMES",
    "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "MODEL_FOR_TIME_SERIES_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",
}


def structure(cfg: Mapping[str, Any], profile: TypeProfile, head: str, layer_mix: str) -> str:
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


def has_lm_keys(cfg: Mapping[str, Any]) -> bool:
    keys = vocabulary().keys
    return any(k in cfg for k in keys.heads) or "num_hidden_layers" in cfg
