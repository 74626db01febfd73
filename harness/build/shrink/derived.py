"""Widths the unshrunk config derives from another width (data/shrink_rules.yaml `derived_widths`).

A projector often takes a width that is another width times a factor: a merger's input is the
vision width x `merge_size`^2 (the merged patches are concatenated), a pixel-shuffle MLP's input
the width / `pixel_shuffle_ratio`^2, a concatenation of k tapped layers k x the width. The common
rules shrink the vision width and leave the product alone (or shrink it to a fixed multiple), so
the tiny model builds and its forward fails at the first matmul. This pass finds, in the
*unshrunk* config, every width that equals a shrunk hidden width times such a factor, and gives
it the shrunk width times the (shrunk) factor. A relation the unshrunk config does not show is
not invented here: `derived_widths.formulas` (keyed by model type) covers the few types whose
defaults do not hold the relation the modeling code needs.
"""

from __future__ import annotations

from typing import Any

from harness.build.formula import evaluate
from harness.build.rules import ShrinkRules
from harness.build.shrink.layers import is_int

_Level = tuple[tuple[str, ...], dict, dict]  # (path, unshrunk level, shrunk level)


def _levels(original: dict, shrunk: dict) -> list[_Level]:
    out: list[_Level] = []

    def walk(path: tuple[str, ...], o: dict, s: dict) -> None:
        out.append((path, o, s))
        for k, v in s.items():
            if isinstance(v, dict) and isinstance(o.get(k), dict):
                walk(path + (k,), o[k], v)

    walk((), original, shrunk)
    return out


def _related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """The same level, its parent or a direct child: a projector sits beside or above its tower."""
    return a == b or a == b[:-1] or b == a[:-1]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _factors(levels: list[_Level], dw: dict) -> list[tuple[tuple[str, ...], float, float]]:
    """(level path, old multiplier, new multiplier) of every factor field and counted list."""
    out = []
    for path, o, s in levels:
        for f in dw.factor_fields:
            old, new = o.get(f), s.get(f)
            if _number(old) and _number(new) and old != 1:
                for p in (1, 2):
                    out += [(path, old**p, new**p), (path, old**-p, new**-p)]
        for f in dw.count_lists:
            old, new = o.get(f), s.get(f)
            if isinstance(old, list) and isinstance(new, list) and old:
                out += [(path, len(old), len(new)), (path, len(old) + 1, len(new) + 1)]
    return out


def _is_target(key: str, dw: dict) -> bool:
    return any(key.endswith(sfx) for sfx in dw.suffixes) and not any(w in key for w in dw.exclude_words)


def keep_derived_widths(original: dict, shrunk: dict, r: ShrinkRules) -> list[str]:
    """Apply the relations (in place); returns the dotted paths of the fields it set."""
    dw = r.derived_widths
    levels = _levels(original, shrunk)
    sources = [
        (path, o[f], s[f])
        for path, o, s in levels
        for f in r.hidden_fields
        if is_int(o.get(f)) and is_int(s.get(f)) and 0 < s[f] < o[f]
    ]
    factors = _factors(levels, dw)
    changed: list[str] = []
    for path, o, s in levels:
        for k, old in o.items():
            if not (isinstance(k, str) and is_int(old) and s.get(k) == old and _is_target(k, dw)):
                continue  # (a field some rule shrank is that rule's: a hidden or head size)
            found: dict[int, int] = {}  # candidate new value -> closeness (0: the same level)
            for spath, so, sn in sources:
                if not _related(path, spath):
                    continue
                for fpath, mo, mn in factors:
                    if not (_related(path, fpath) or _related(spath, fpath)):
                        continue
                    if abs(so * mo - old) > 1e-6 * old:
                        continue
                    new = sn * mn
                    if abs(new - round(new)) < 1e-6 and round(new) >= 1:
                        found[round(new)] = min(found.get(round(new), 9), len(spath) != len(path))
            best = sorted(found, key=lambda v: found[v])
            if best and (len(best) == 1 or found[best[0]] < found[best[1]]) and s[k] != best[0]:
                s[k] = best[0]
                changed.append(".".join(path + (k,)))
    changed += _apply_formulas(shrunk, dw.formulas)
    return changed


# --------------------------------------------------------------------------- per-type formulas
def _numeric(d: dict) -> dict[str, Any]:
    """A level as a formula sees it: its positive numbers, its lists (for `len`) and its
    sub-configs alike (`semantic_model_config.hidden_size`); any other field is missing."""
    return {
        k: _numeric(v) if isinstance(v, dict) else v
        for k, v in d.items()
        if _number(v) or isinstance(v, (dict, list))
    }


def _apply_formulas(shrunk: dict, formulas: dict[str, dict[str, str]]) -> list[str]:
    """{model_type: {field: formula}}: at every level of that type, the field becomes the
    formula over the same level's (shrunk) fields and its sub-configs' (skipped when a name is
    missing)."""
    changed: list[str] = []

    def walk(path: tuple[str, ...], d: dict) -> None:
        names = _numeric(d)
        for f, expr in formulas.get(d.get("model_type"), {}).items():
            try:
                v = evaluate(expr, names)
            except (NameError, ValueError):
                continue
            if _number(v) and abs(v - round(v)) < 1e-6 and round(v) >= 1 and d.get(f) != round(v):
                d[f] = round(v)
                changed.append(".".join(path + (f,)))
        for k, v in d.items():
            if isinstance(v, dict):
                walk(path + (k,), v)

    walk((), shrunk)
    return changed
