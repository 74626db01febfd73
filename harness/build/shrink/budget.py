"""Bring a shrunk config under the parameter budget when the named rules were not enough.

Long-tail architectures have size knobs no rule names (codec channel counts, vocoder widths,
entity vocabularies). This pass asks the model itself: it halves the largest remaining integer
sizes one at a time and keeps a change only when the model still builds and gets smaller. Ids,
lengths, rates and indices are never touched, except a vocabulary named with one of those words
(Gemma-3n's `vocab_size_per_layer_input`, a 262,144-row table per layer): it is a table size like
any other, kept at least as large as the shrunk main vocabulary so every token id still indexes it.
Sizes from 16 up are knobs: a codec whose widths double per stage from 32 filters (VibeVoice: 2,048
channels at the last of six stages) is only brought under the budget by its base width.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

_PROTECTED = (
    "token",
    "_id",
    "index",
    "idx",
    "rate",
    "length",
    "position",
    "seed",
    "step",
    "period",
    "epsilon",
    "eps",
    "layer",
    "num_labels",
    "sample",
    "max_",
    "min_",
    "window",
    "patch",
    "image_size",
    "stride",
    "kernel",
    "freq",
    "bins",
    "hop",
    "fft",
    "n_mels",
    "mel",
    "chunk",
    "cache",
    "num_channels",
    "in_channels",
    "resolution",
    "_size_per_head",
)


#: the smallest size the pass quarters (to at least _FLOOR)
_MIN_KNOB = 16
_FLOOR = 8


def _protected(key: str) -> bool:
    return any(p in key for p in _PROTECTED)


def _protected_vocab(key: str) -> bool:
    """A vocabulary whose name holds a protected word (see the module docstring)."""
    return "vocab" in key and _protected(key)


def _candidates(d: dict, path: tuple = (), vocab_floor: int = 0) -> list[tuple[tuple, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and (k.endswith("_config") or "model_type" in v):
            out += _candidates(v, path + (k,), vocab_floor)
            continue
        if _protected(k) and not (_protected_vocab(k) and isinstance(v, int) and v > vocab_floor):
            continue
        if isinstance(v, int) and not isinstance(v, bool) and v >= _MIN_KNOB:
            out.append((path + (k,), v))
        elif (
            isinstance(v, list)
            and v
            and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
            and max(v) >= _MIN_KNOB
        ):
            out.append((path + (k,), max(v)))
    return sorted(out, key=lambda c: -c[1])


def _quartered(path: tuple, vocab_floor: int) -> Callable[[int], int]:
    """The halving step of one knob: a quarter, at least _FLOOR; a protected-word vocabulary
    (see the module docstring) at least `vocab_floor`."""
    floor = vocab_floor if _protected_vocab(path[-1]) else _FLOOR
    return lambda x: max(floor, x // 4) if x >= _MIN_KNOB else x


def _set(d: dict, path: tuple, fn) -> None:
    for p in path[:-1]:
        d = d[p]
    v = d[path[-1]]
    d[path[-1]] = [fn(x) for x in v] if isinstance(v, list) else fn(v)


def _shrink_widths_everywhere(d: dict, path: tuple, fn) -> None:
    """Halve the knob at `path`, and with it every other width list at any level that names the
    same sizes: chained lists (EfficientNet's `in_channels` are its `out_channels` shifted by one)
    must keep agreeing, or the model builds and its forward fails."""
    target = d
    for p in path[:-1]:
        target = target[p]
    v = target[path[-1]]
    sizes = set(v) if isinstance(v, list) else {v}
    mapping = {x: fn(x) for x in sizes}
    _set(d, path, fn)

    def visit(level: dict) -> None:
        for k, x in level.items():
            if isinstance(x, dict):
                visit(x)
            elif level is target and k == path[-1]:
                continue
            elif _is_width_list(k, x) and any(y in mapping for y in x):
                level[k] = [mapping.get(y, y) for y in x]
            elif (
                isinstance(x, int)
                and not isinstance(x, bool)
                and x in mapping
                and any(w in k for w in _SCALAR_WIDTH_WORDS + (_LEVEL_WIDTH_WORDS if level is target else ()))
                and not _protected(k)
            ):
                # ZoeDepth's `bottleneck_features` is its `fusion_hidden_size`; at the knob's own
                # level, Llama-4's `projector_input_dim` feeds `projector_output_dim`
                level[k] = mapping[x]

    visit(d)


def _is_width_list(key: str, v: Any) -> bool:
    return (
        isinstance(v, list)
        and len(v) > 1
        and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        and _is_width_key(key)
    )


def _is_width_key(key: str) -> bool:
    return any(w in key for w in _WIDTH_WORDS)


#: Fields that name channel widths (the halving keeps them in step).
_WIDTH_WORDS = ("channels", "hidden_size", "_dim", "dims", "_sizes", "_features")
_SCALAR_WIDTH_WORDS = ("channels", "hidden_size", "_features")
#: ... and, at the halved knob's own config level, these too (projector widths of one tower).
_LEVEL_WIDTH_WORDS = ("_dim",)


def fit_budget(
    config: dict, count: Callable[[dict], int], budget: int, max_tries: int = 40, vocab_floor: int = 0
) -> tuple[dict, int, list[str]]:
    """Greedy halving of large sizes until `count(config) < budget`. Returns (config, params, changed).

    `vocab_floor`: the shrunk main vocabulary, below which no protected-word vocabulary goes."""
    best = copy.deepcopy(config)
    params = count(best)
    changed: list[str] = []
    tries = 0
    while params >= budget and tries < max_tries:
        improved = False
        for path, _ in _candidates(best, vocab_floor=vocab_floor):
            tries += 1
            trial = copy.deepcopy(best)
            _shrink_widths_everywhere(trial, path, _quartered(path, vocab_floor))
            try:
                n = count(trial)
            except Exception:  # noqa: BLE001 - that knob is constrained: try the next one
                n = None
            if n is not None and n < params * 0.95:
                best, params, improved = trial, n, True
                changed.append(".".join(path))
                break
            if tries >= max_tries:
                break
        if not improved:
            break
    return best, params, changed
