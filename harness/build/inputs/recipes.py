"""Hand recipes for inputs no processor makes (time series, task prompts, SAM-style prompts...).

A recipe is data (``inputs`` / ``by_model_type`` / ``by_image_processor`` in input_recipes.yaml,
typed as `harness.build.rules.Recipe`): a shape formula over the config, a fill kind and
optionally whether it is a label. This module only knows the fill kinds.
"""

from __future__ import annotations

from functools import cache

import torch

from harness.build.formula import defined, evaluate
from harness.build.inputs.base import ConfigScope, Maker
from harness.build.rules import Recipe, input_recipes


def _fill(variant: Recipe, shape: list[int], maker: Maker, scope: ConfigScope) -> torch.Tensor:
    kind = variant.fill
    high = int(evaluate(variant.high, scope)) if variant.high is not None else None
    if kind == "randn":
        return maker.randn(*shape)
    if kind == "rand":
        t = maker.rand(*shape)
        return t * float(evaluate(variant.scale, scope)) if variant.scale is not None else t
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
        k = round(shape[-1] * float(variant.ratio))
        ranks = scores.argsort(dim=-1).argsort(dim=-1)
        return ranks < k
    if kind == "tokens":  # a fixed prompt (token ids), the same for every sample
        ids = torch.tensor([int(x) for x in evaluate(variant.tokens, scope)], dtype=torch.long)
        return ids.expand(*shape[:-1], ids.shape[0]).clone()
    # box: (x0, y0, x1, y1) with x0 < x1, y0 < y1, inside the image
    scale = float(evaluate(variant.scale if variant.scale is not None else 1, scope))
    corners = maker.rand(*shape[:-1], 2, 2).sort(dim=-2).values * scale
    return corners.reshape(*shape)  # (point 0, point 1) x (x, y) -> x0, y0, x1, y1


@cache
def image_processor_name(model_type: str) -> str | None:
    from harness.build.inputs.processors import image_processor_class

    try:
        cls = image_processor_class(model_type, input_recipes().processors.classes.image)
    except Exception:  # noqa: BLE001 - a mapping that does not resolve here: no processor recipes
        return None
    return getattr(cls, "__name__", None)


def type_recipes(model_type: str) -> dict[str, tuple[str, list[Recipe]]]:
    """The hand recipes of one model type, {input: (the key it came from, its variants)}: its own
    (`by_model_type`) over those of the image processor it is fed by (`by_image_processor`: a
    processor that cannot run here, whose layout every type it feeds takes: PI0's feeds pi0 and
    pi05)."""
    r = input_recipes()
    merged: dict[str, tuple[str, list[Recipe]]] = {}
    if r.by_image_processor:
        name = image_processor_name(model_type)
        merged.update({k: (str(name), v) for k, v in r.by_image_processor.get(name, {}).items()})
    merged.update({k: (model_type, v) for k, v in r.by_model_type.get(model_type, {}).items()})
    return merged


def type_recipe_names(model_type: str) -> list[str]:
    """Inputs whose recipe replaces the generic synthesizer's: the model type's own recipes and
    the generic ones marked `replaces_synthetic` (they still apply only when their `when` holds)."""
    own = set(type_recipes(model_type))
    own |= {
        name
        for name, variants in input_recipes().inputs.items()
        if any(v.replaces_synthetic for v in variants)
    }
    return sorted(own)


def through_kwargs_names(model_type: str) -> set[str]:
    """The type's recipe inputs its forward takes in `**kwargs` and hands on to a submodule
    (`through_kwargs: true`): the bare PI0.5 passes the flow-matching time embedding to its action
    expert that way. Made only for a forward that takes `**kwargs`."""
    return {
        name
        for name, (_, variants) in type_recipes(model_type).items()
        if any(v.through_kwargs for v in variants)
    }


def recipe_input(
    name: str, model_type: str, maker: Maker, scope: ConfigScope, required: bool = False
) -> tuple[torch.Tensor, str, bool] | None:
    """(tensor, recipe key, is_label) for input `name`, or None when no recipe applies
    (`required`: the forward has no default for it, so `required_only` variants apply too)."""
    candidates: list[tuple[str, Recipe]] = []
    if name in (own := type_recipes(model_type)):
        key, variants = own[name]
        candidates += [(f"{key}.{name}", v) for v in variants]
    candidates += [(name, v) for v in input_recipes().inputs.get(name, [])]
    for key, variant in candidates:
        if (variant.when is not None and not defined(variant.when, scope)) or (
            variant.required_only and not required
        ):
            continue
        try:  # a name the config does not have, in the shape or the fill's formulas: does not apply
            shape = [int(x) for x in evaluate(variant.shape, scope)]
            tensor = _fill(variant, shape, maker, scope)
        except (NameError, TypeError, KeyError, IndexError, ValueError, ZeroDivisionError):
            continue
        if variant.dtype == "long":
            tensor = tensor.long()
        return tensor, key, variant.label
    return None
