"""A partial Hub config (a metadata dump's size summary) -> the fields its config class really has.

Why: partial configs (``config_level: partial``, e.g. llmfit's and gpu_poor's dumps) are not
config.json files. They list facts under normalized names: ``head_dim`` computed as hidden / heads
for every model (DeepSeek-V3 has no such field: its head size is ``qk_rope_head_dim``, and a
stray 56 there breaks the rotary embedding), ``context_length``, ``is_moe``, ``active_experts``,
a layer count that contradicts the default's per-layer lists (Zamba2's 38 vs its 54 layer
types), a hidden / heads ``head_dim`` for a type whose ``head_dim`` is something else (LongCat-Flash's
rotary size), and text-model sizes at the top level of composite configs (Gemma-4, Zamba2-VL...) whose text
model lives in ``text_config``. Applied literally over the type's defaults they build a model
that never existed, and its failure would be blamed on the harness. So a partial config keeps
only keys the type's config class takes (its constructor parameters or `attribute_map` aliases;
a summary name such as ``active_experts`` sets the class's own field for it, ``num_experts_per_tok``
or ``moe_topk``, per agents/data/partial_fields.yaml);
a key its text sub-config takes moves into ``text_config``; anything else is dropped and listed
by `dropped_fields` (a config class whose constructor names no fields, only ``**kwargs``, keeps
the config as given: nothing to check it against).

    normalize_partial({"model_type": "deepseek_v3", "head_dim": 56, "hidden_size": 7168})
    -> {"model_type": "deepseek_v3", "hidden_size": 7168}
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from pydantic import RootModel

from contracts.rulefiles import cached_rules, resource

#: keys every level keeps as they are (identity, not sizes)
_ALWAYS_KEPT = frozenset({"model_type", "architectures"})
#: the sub-config a composite config keeps its language model in
_TEXT_SUBCONFIG = "text_config"


class SummaryAliases(RootModel[dict[str, tuple[str, ...]]]):
    """agents/data/partial_fields.yaml: a summary's name -> the config fields it stands for, in
    preference order."""


def summary_aliases() -> dict[str, tuple[str, ...]]:
    return cached_rules(SummaryAliases, str(resource("agents", "data/partial_fields.yaml"))).root


def _field_for(key: str, fields: frozenset[str]) -> str | None:
    """The class's field a summary key sets: itself, else its first alias the class takes."""
    if key in fields:
        return key
    return next((f for f in summary_aliases().get(key, ()) if f in fields), None)


@cache
def config_fields(config_cls: type) -> frozenset[str]:
    """The field names a config class takes: constructor parameters and attribute_map aliases
    (the one definition; the shrinker's flat-config nesting uses it too)."""
    params = set()
    for klass in config_cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            sig = inspect.signature(init)
        except (TypeError, ValueError):
            continue
        params |= {
            n
            for n, p in sig.parameters.items()
            if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        }
        if klass.__name__ == "PreTrainedConfig" or klass.__name__ == "PretrainedConfig":
            return frozenset()  # only the generic base constructor: the class names no fields
        break  # the most derived __init__ is what the class takes
    params |= set(getattr(config_cls, "attribute_map", {}) or {})
    return frozenset(params)


@cache
def text_config_fields(config_cls: type) -> frozenset[str]:
    """Fields of a composite config's text sub-config: the class its default builds there (an
    `AutoConfig` slot, as in Llava, is whatever the type's default text model is)."""
    if _TEXT_SUBCONFIG not in (getattr(config_cls, "sub_configs", None) or {}):
        return frozenset()
    try:
        sub = getattr(config_cls(), _TEXT_SUBCONFIG, None)
    except Exception:  # noqa: BLE001 - a default that does not build: nothing to move into it
        return frozenset()
    return config_fields(type(sub)) if sub is not None else frozenset()


@cache
def _listed_layer_count(config_cls: type) -> int | None:
    """The default's layer count when the default also lists something per layer (`layer_types`,
    Zamba2's hybrid lists...): a summary's other layer count cannot be applied without inventing
    that list (the config class rejects the mismatch), so it is dropped (None: no such list)."""
    try:
        default = config_cls()
    except Exception:  # noqa: BLE001
        return None
    n = getattr(default, "num_hidden_layers", None)
    if not isinstance(n, int) or n < 2:
        return None
    lists = [v for v in default.to_dict().values() if isinstance(v, list) and len(v) == n]
    return n if lists else None


@cache
def _head_dim_is_quotient(config_cls: type) -> bool:
    """Whether the type's `head_dim` is hidden / heads in its own default (Llama: yes; LongCat-Flash,
    whose `head_dim` is its rotary size, 64 of a 6144 / 64 = 96 quotient: no)."""
    try:
        d = config_cls().to_dict()
    except Exception:  # noqa: BLE001 - nothing to check against: keep the summary's value
        return True
    hd, hidden, heads = d.get("head_dim"), d.get("hidden_size"), d.get("num_attention_heads")
    if not all(isinstance(v, int) and v > 0 for v in (hd, hidden, heads)):
        return True
    return hd == hidden // heads


def _summary_quotient(config: dict[str, Any]) -> int | None:
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 else None


def config_class(model_type: str):
    """The installed transformers' config class of a model type (None when it does not know the
    type). The one lookup: harness.build.shrink.config_class raises on None."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None


def normalize_partial(config: dict[str, Any], model_type: str | None = None) -> dict[str, Any]:
    """The partial config with only real fields of its type's config class (see module doc).

    A type the installed transformers does not know is returned unchanged (the check reports it)."""
    return _split(config, model_type)[0]


def dropped_fields(config: dict[str, Any], model_type: str | None = None) -> list[str]:
    """The keys `normalize_partial` drops (facts of the dump that are no field of the class)."""
    return _split(config, model_type)[1]


def _split(config: dict[str, Any], model_type: str | None) -> tuple[dict[str, Any], list[str]]:
    mt = model_type or config.get("model_type")
    cls = config_class(str(mt)) if mt else None
    top = config_fields(cls) if cls is not None else frozenset()
    if not top:
        return dict(config), []
    text_fields = text_config_fields(cls)
    listed = _listed_layer_count(cls)
    out: dict[str, Any] = {}
    moved: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in config.items():
        if key in _ALWAYS_KEPT:
            out[key] = value
        elif key == "num_hidden_layers" and listed is not None and value != listed and key in top:
            dropped.append(key)
        elif (
            key == "head_dim"
            and key in top
            and value == _summary_quotient(config)
            and not _head_dim_is_quotient(cls)
        ):
            dropped.append(key)  # the summary's hidden / heads, not the type's head_dim
        elif (name := _field_for(key, top)) is not None:
            out.setdefault(name, value)
        elif (name := _field_for(key, text_fields)) is not None:
            moved.setdefault(name, value)
        else:
            dropped.append(key)
    if moved:
        given = out.get(_TEXT_SUBCONFIG)
        out[_TEXT_SUBCONFIG] = {**moved, **(given if isinstance(given, dict) else {})}
    return out, sorted(dropped)
