"""Fields the transformers config class itself owns, which the dict-level shrink rules cannot see.

- a flat Hub config of a composite type (remote-code format) names its text model's fields at
  the top level: they move into `text_config`;
- integer fields the class computes when they are None are recomputed from the shrunk sizes.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from agents.partial_config import config_fields, text_config_fields
from harness.build.shrink.layers import is_int


def get_path(d: dict, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def nest_flat_text_fields(cfg: dict, cls) -> None:
    """A flat Hub config of a composite type (remote-code format: Step-3.7-Flash's layers, heads and
    `sliding_window` at the top level, no `text_config`): the fields the top-level class does not
    take and its text sub-config does move into `text_config`, where the model reads them
    (left at the top level, the class ignores them and the text model gets its defaults). Which
    fields a class takes is agents.partial_config's definition (partial summaries nest the same way)."""
    if cfg.get("text_config") is not None:
        return
    own, text = config_fields(cls), text_config_fields(cls)
    moved = {k: cfg.pop(k) for k in list(cfg) if k in text and k not in own}
    if moved:
        cfg["text_config"] = moved


def class_derived_fields(cls, d: dict, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Integer fields the config class computes itself: a dataclass field whose default is None
    (Zamba's `attention_hidden_size` = 2 x hidden; or a list of integers: Sapiens2's per-layer
    key/value heads from its head counts), or an attribute that is no field at all,
    which `__post_init__` sets from other fields (Zamba2's `mamba_headdim` = expand x hidden /
    mamba heads). Building the level without them gives the same value. After shrinking they go
    back to None, or out of the dict (an attribute passed in overrides what the class computed),
    so the class computes them from the shrunk sizes (the shrinker would keep the stale product).
    Sub-configs too."""
    out: set[tuple[str, ...]] = set()
    if not dataclasses.is_dataclass(cls):
        return out
    args = {k: v for k, v in d.items() if k != "model_type"}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    candidates = [
        n for n, f in fields.items() if f.default is None and (is_int(d.get(n)) or _int_list(d.get(n)))
    ]
    candidates += [k for k, v in d.items() if k not in fields and not k.startswith("_") and is_int(v)]
    out.update(path + (name,) for name in candidates if _class_computes(cls, args, name))
    for key in getattr(cls, "sub_configs", None) or {}:
        sub_cls = _sub_class(cls, key, d.get(key))
        if sub_cls is not None:
            out |= class_derived_fields(sub_cls, d[key], path + (key,))
    return out


def _int_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(is_int(x) for x in v)


def _stale(new: Any, old: Any) -> bool:
    """The shrinker left a derived value as it was: the same integer, or a per-layer list whose
    entries are the unshrunk ones, only resampled with the layers (Sapiens2's key/value heads per
    layer: 16 and 8 for a level whose heads are now 2); a list left as it was stays (the budget
    pass may still halve it). A strictly increasing list is a list of
    layer indices, which the shrinker remaps itself (Mllama's cross-attention layers)."""
    if _int_list(new) and _int_list(old):
        indices = all(a < b for a, b in itertools.pairwise(old))
        return not indices and new != old and set(new) <= set(old)
    return new == old


def _sub_class(cls, key: str, sub: Any):
    """The config class of sub-config `key`: the one the class names, else (an `AutoConfig`
    slot: VisionTextDualEncoder's towers) the class of the sub-dict's own model_type."""
    if not isinstance(sub, dict):
        return None
    named = (getattr(cls, "sub_configs", None) or {}).get(key)
    if isinstance(named, type) and dataclasses.is_dataclass(named):
        return named
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    mt = sub.get("model_type")
    return CONFIG_MAPPING[mt] if isinstance(mt, str) and mt in CONFIG_MAPPING else None


def recompute_class_derived(original: dict, d: dict, derived: set[tuple[str, ...]], cls=None) -> None:
    """Derived fields the shrinker left as they were go back to None, or out of the dict when
    they are no field of the class (a rule that shrank one knows it: a window, a head size; a
    class fallback is often a constant, not a product). The attributes of one level go out
    together, and only when the class computes every one of them at least 2 from the shrunk
    sizes (BROS's sinusoid width hidden / 4 / 8 would be 1: its stale pair still agrees)."""
    attrs: dict[str, list[str]] = {}
    for path in derived:
        parent = ".".join(path[:-1])
        level = get_path(d, parent) if parent else d
        old = get_path(original, parent) if parent else original
        if (
            isinstance(level, dict)
            and isinstance(old, dict)
            and _stale(level.get(path[-1]), old.get(path[-1]))
        ):
            if _is_field(cls, path, original):
                level[path[-1]] = None
            else:
                attrs.setdefault(parent, []).append(path[-1])
    for parent, names in attrs.items():
        level = get_path(d, parent) if parent else d
        level_cls = _class_at(cls, tuple(parent.split(".")) if parent else (), original)
        try:
            rebuilt = level_cls(**{k: v for k, v in level.items() if k not in names and k != "model_type"})
        except Exception:  # noqa: BLE001 - the shrunk level needs them as they are
            continue
        if all(is_int(getattr(rebuilt, n, None)) and getattr(rebuilt, n) >= 2 for n in names):
            for n in names:
                level.pop(n, None)


def _class_at(cls, parts: tuple[str, ...], d: dict):
    for part in parts:
        cls, d = _sub_class(cls, part, d.get(part) if isinstance(d, dict) else None), (d or {}).get(part)
    return cls


def _is_field(cls, path: tuple[str, ...], d: dict) -> bool:
    """Whether `path` names a dataclass field of `cls` (its sub-config classes followed in `d`)."""
    cls = _class_at(cls, path[:-1], d)
    return not (isinstance(cls, type) and dataclasses.is_dataclass(cls)) or path[-1] in {
        f.name for f in dataclasses.fields(cls)
    }


def without_class_derived_attributes(cls, d: dict) -> list[str]:
    """Drop the top-level attributes that are no field of `cls` and that the class computes
    again to the same value when left out (EfficientLoFTR's per-block channel lists from
    `out_features`): the budget pass halves fields, and a derived value passed in would override
    what the class computes from the halved ones. Returns the names dropped."""
    if not dataclasses.is_dataclass(cls):
        return []
    fields = {f.name for f in dataclasses.fields(cls)}
    args = {k: v for k, v in d.items() if k != "model_type"}
    names = [
        k
        for k, v in args.items()
        if k not in fields
        and not k.startswith("_")
        and (is_int(v) or (isinstance(v, list) and v and all(is_int(x) or _int_list(x) for x in v)))
    ]
    dropped = [name for name in names if _class_computes(cls, args, name)]
    for name in dropped:
        d.pop(name, None)
    return dropped


def _class_computes(cls, args: dict, name: str) -> bool:
    """The class built without `name` gives it the same value: it derives it from the rest."""
    try:
        rebuilt = cls(**{k: v for k, v in args.items() if k != name})
    except Exception:  # noqa: BLE001 - the class needs it: not derived
        return False
    return getattr(rebuilt, name, None) == args[name]
