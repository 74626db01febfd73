"""Token ids and vocab sizes of a config being shrunk: every id a shrunk vocab no longer holds moves
to distinct ids at its top (same id -> same new id), so special tokens stay special and inside
the embedding table."""

from __future__ import annotations

from typing import Any

from harness.build.rules import ShrinkRules
from harness.build.shrink.class_fields import get_path
from harness.build.shrink.layers import is_int


def is_subconfig(key: str, value: Any) -> bool:
    return isinstance(value, dict) and (key.endswith("_config") or "model_type" in value)


def token_key(key: str, r: ShrinkRules) -> bool:
    return any(key.endswith(s) for s in r.token_id_suffixes) or key in (
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
    )


def collect_token_ids(d: dict, r: ShrinkRules, out: set[int]) -> None:
    for k, v in d.items():
        if is_subconfig(k, v):
            collect_token_ids(v, r, out)
        elif token_key(k, r):
            if is_int(v):
                out.add(v)
            elif isinstance(v, list):
                out.update(x for x in v if is_int(x))


def token_map(d: dict, vocab: int, r: ShrinkRules) -> dict[int, int]:
    """Ids that do not fit the new vocab -> distinct ids at its top (same id -> same new id)."""
    ids: set[int] = set()
    collect_token_ids(d, r, ids)
    mapping: dict[int, int] = {}
    nxt = vocab - 1
    taken = {i for i in ids if 0 <= i < vocab}
    for old in sorted(i for i in ids if i >= vocab):
        while nxt in taken:
            nxt -= 1
        mapping[old] = nxt
        taken.add(nxt)
    return mapping


def apply_token_map(d: dict, mapping: dict[int, int], r: ShrinkRules) -> None:
    for k, v in list(d.items()):
        if is_subconfig(k, v):
            apply_token_map(v, mapping, r)
        elif token_key(k, r):
            if is_int(v):
                d[k] = mapping.get(v, v)
            elif isinstance(v, list):
                d[k] = [mapping.get(x, x) if is_int(x) else x for x in v]


def refit_token_ids(d: dict, changes: list[str], r: ShrinkRules) -> bool:
    """A vocab the budget pass cut (Florence-2's text vocab 1024 -> 256): the token ids remapped
    to the top of the shrunk vocab move to the top of the cut one. True when an id moved."""
    cut = [v for p in changes if p.rpartition(".")[2] in r.vocab_fields and is_int(v := get_path(d, p))]
    mapping = token_map(d, min(cut), r) if cut else {}
    apply_token_map(d, mapping, r)
    return bool(mapping)
