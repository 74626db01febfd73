"""Hand recipes for inputs no processor makes (time series, task prompts, SAM-style prompts...).

A recipe is data (``inputs`` / ``by_model_type`` in input_recipes.yaml): a shape formula over the
config, a fill kind and optionally whether it is a label. This module only knows the fill kinds.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import torch
import yaml

from harness.build.inputs.base import ConfigScope, Maker
from harness.build.inputs.expr import RecipeError, defined, evaluate


@lru_cache(maxsize=1)
def recipes() -> dict[str, Any]:
    return yaml.safe_load(resources.files("harness").joinpath("data/input_recipes.yaml").read_text())


def _applies(variant: dict, scope: ConfigScope) -> bool:
    if "when" in variant:
        return defined(variant["when"], scope)
    return True


def _fill(variant: dict, shape: list[int], maker: Maker, scope: ConfigScope) -> torch.Tensor:
    kind = variant.get("fill", "randn")
    high = int(evaluate(variant["high"], scope)) if "high" in variant else None
    if kind == "randn":
        return maker.randn(*shape)
    if kind == "rand":
        t = maker.rand(*shape)
        return t * float(evaluate(variant["scale"], scope)) if "scale" in variant else t
    if kind == "positive":
        return maker.rand(*shape) + 0.5
    if kind == "ids":
        return maker.ids(*shape, high=high)
    if kind == "int":
        return maker.labels_of(max(1, high or 2), *shape)
    if kind == "ones":
        return torch.ones(*shape, dtype=torch.long)
    if kind == "zeros":
        return torch.zeros(*shape, dtype=torch.long)
    if kind == "bool_mask":  # the same number masked in every sample, as a masking generator does
        scores = maker.rand(*shape)
        k = int(round(shape[-1] * float(variant.get("ratio", 0.5))))
        ranks = scores.argsort(dim=-1).argsort(dim=-1)
        return ranks < k
    if kind == "tokens":  # a fixed prompt (token ids), the same for every sample
        ids = torch.tensor([int(x) for x in evaluate(variant["tokens"], scope)], dtype=torch.long)
        return ids.expand(*shape[:-1], ids.shape[0]).clone()
    if kind == "box":  # (x0, y0, x1, y1) with x0 < x1, y0 < y1, inside the image
        scale = float(evaluate(variant.get("scale", 1), scope))
        corners = maker.rand(*shape[:-1], 2, 2).sort(dim=-2).values * scale
        return corners.reshape(*shape)  # (point 0, point 1) x (x, y) -> x0, y0, x1, y1
    raise RecipeError(f"unknown fill kind {kind!r}")


@lru_cache(maxsize=None)
def image_processor_name(model_type: str) -> str | None:
    from harness.build.inputs.processors import image_processor_class

    try:
        cls = image_processor_class(model_type, (recipes()["processors"].get("classes") or {}).get("image", {}))
    except Exception:  # noqa: BLE001 - a mapping that does not resolve here: no processor recipes
        return None
    return getattr(cls, "__name__", None)


def type_recipes(model_type: str) -> dict[str, Any]:
    """The hand recipes of one model type: its own (`by_model_type`) over those of the image
    processor it is fed by (`by_image_processor`: a processor that cannot run here, whose layout
    every type it feeds takes: PI0's feeds pi0 and pi05)."""
    r = recipes()
    merged: dict[str, Any] = {}
    by_processor = r.get("by_image_processor") or {}
    if by_processor:
        name = image_processor_name(model_type)
        merged.update({k: _keyed(v, name) for k, v in (by_processor.get(name) or {}).items()})
    merged.update((r.get("by_model_type") or {}).get(model_type) or {})
    return merged


def _keyed(entry: Any, key: str) -> Any:
    """A recipe's variants marked with the key they came from (its source says which recipe)."""
    return [dict(v, _key=key) for v in _variants(entry)]


def type_recipe_names(model_type: str) -> list[str]:
    """Inputs whose recipe replaces the generic synthesizer's: the model type's own recipes and
    the generic ones marked `replaces_synthetic` (they still apply only when their `when` holds)."""
    own = set(type_recipes(model_type))
    own |= {name for name, entry in (recipes().get("inputs") or {}).items()
            if any(v.get("replaces_synthetic") for v in _variants(entry))}
    return sorted(own)


def through_kwargs_names(model_type: str) -> set[str]:
    """The type's recipe inputs its forward takes in `**kwargs` and hands on to a submodule
    (`through_kwargs: true`): the bare PI0.5 passes the flow-matching time embedding to its action
    expert that way. Made only for a forward that takes `**kwargs`."""
    return {name for name, entry in type_recipes(model_type).items()
            if any(v.get("through_kwargs") for v in _variants(entry))}


def recipe_input(name: str, model_type: str, maker: Maker, scope: ConfigScope,
                 required: bool = False) -> tuple[torch.Tensor, str, bool] | None:
    """(tensor, recipe key, is_label) for input `name`, or None when no recipe applies
    (`required`: the forward has no default for it, so `required_only` variants apply too)."""
    r = recipes()
    candidates = [(f"{v.get('_key', model_type)}.{name}", v) for v in _variants(type_recipes(model_type).get(name))]
    candidates += [(name, v) for v in _variants(r.get("inputs", {}).get(name))]
    for key, variant in candidates:
        if not _applies(variant, scope) or variant.get("required_only") and not required:
            continue
        try:  # a name the config does not have, in the shape or the fill's formulas: does not apply
            shape = [int(x) for x in evaluate(variant["shape"], scope)]
            tensor = _fill(variant, shape, maker, scope)
        except (NameError, TypeError, KeyError, IndexError, ValueError, ZeroDivisionError):
            continue
        if variant.get("dtype") == "long":
            tensor = tensor.long()
        return tensor, key, bool(variant.get("label"))
    return None


def _variants(entry: Any) -> list[dict]:
    if entry is None:
        return []
    return entry if isinstance(entry, list) else [entry]
