"""Required inputs no processor or recipe makes, shaped as the forward's own docstring says.

transformers documents each forward argument as ``name (`torch.FloatTensor` of shape
`(batch_size, sequence_length, hidden_size)`)``. For an input the forward requires (no default)
and nothing else made, the documented shape is evaluated over the shrunk config: each dimension
name is looked up in ``docstring_shapes.dimensions`` (input_recipes.yaml: ``batch_size`` ->
``batch``), else as a config field (``config.block_size``, ``hidden_size``). A dimension that
cannot be resolved leaves the input alone (the forward stage then reports the model's error).
"""

from __future__ import annotations

import inspect
import re

import torch

from harness.build.formula import evaluate
from harness.build.inputs.base import ConfigScope, Maker
from harness.build.rules import DocstringShapes

_ARG = re.compile(r"^\s*(?P<name>\w+) \(`(?:torch\.)?(?P<type>\w+)`\s+of shape\s+`(?P<shape>[^`]+)`", re.M)


def documented_shapes(fn) -> dict[str, tuple[str, list[str]]]:
    """name -> (tensor type, dimension expressions) for every argument the docstring shapes."""
    doc = inspect.getdoc(fn) or ""
    out: dict[str, tuple[str, list[str]]] = {}
    for m in _ARG.finditer(doc):
        shape = m["shape"].strip()
        shape = shape[1:-1] if shape[:1] in "([" and shape[-1:] in ")]" else shape
        out.setdefault(m["name"], (m["type"], [d.strip() for d in _split(shape) if d.strip()]))
    return out


_PARAGRAPH = re.compile(
    r"^(?P<indent>[ \t]*)(?P<name>\w+) \((?P<body>.*?)(?=^(?P=indent)\w+ \(|\Z)", re.M | re.S
)
_UNUSED = re.compile(r"\bit is not used\b|\bis not used\b|preserved for compatibility", re.I)


def documented_unused(fn) -> set[str]:
    """Arguments the forward's docstring says it does not use ("preserved for compatibility, but it
    is not used": Qwen2-Audio's and Voxtral's encoders, which still hand a given one to their
    layers as an additive mask)."""
    doc = inspect.getdoc(fn) or ""
    return {m["name"] for m in _PARAGRAPH.finditer(doc) if _UNUSED.search(m["body"])}


def _split(shape: str) -> list[str]:
    """Top-level comma split (a dimension may be `dim * len(config.target_layer_ids)`)."""
    parts, depth, cur = [], 0, ""
    for ch in shape:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def _dimension(expr: str, scope: ConfigScope, aliases: dict[str, str]) -> int | None:
    expr = re.sub(r"\s*\((?:>=|<=|>|<)[^)]*\)", "", expr).replace("self.config.", "config.")  # "n (>= batch)"
    expr = re.sub(r"\b\w+\b", lambda m: f"({aliases[m[0]]})" if m[0] in aliases else m[0], expr)
    try:
        value = evaluate(expr, scope)
    except (NameError, TypeError, KeyError, IndexError, ValueError, ZeroDivisionError):
        return None
    return (
        int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
    )


def docstring_input(
    fn, name: str, maker: Maker, scope: ConfigScope, rules: DocstringShapes
) -> torch.Tensor | None:
    """A seeded tensor for `name` in the documented shape, or None."""
    documented = documented_shapes(fn).get(name)
    if documented is None:
        return None
    kind, dims = documented
    shape = [_dimension(d, scope, rules.dimensions) for d in dims]
    if not shape or any(d is None for d in shape):
        return None
    if re.search(rules.mask_names, name):  # every position valid
        return torch.ones(*shape, dtype=torch.long)
    if kind in rules.integer_types:  # token ids only: other integers (positions) carry meaning
        return maker.ids(*shape) if re.search(rules.token_id_names, name) else None
    if kind in rules.bool_types:
        return torch.ones(*shape, dtype=torch.bool)
    return maker.randn(*shape)
