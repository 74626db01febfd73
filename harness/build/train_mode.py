"""Make a shrunk config and its model ready for a deterministic training step.

Backward runs in train mode (models such as Reformer refuse backward in eval mode), so every
dropout-like probability of the config is set to 0 (the field patterns are data:
``harness/data/train_mode.yaml``) and dropout modules with a hard-coded probability get p = 0:
train-mode outputs then equal eval-mode outputs, and two runs give the same gradients. A config
level without a pad token id gets a free one (decoder-LM sequence classification needs it).
"""

from __future__ import annotations

import re
from functools import lru_cache

import torch

from harness.build.rules import train_mode_rules


@lru_cache(maxsize=1)
def _pattern() -> re.Pattern:
    return re.compile("|".join(f"(?:{p})" for p in train_mode_rules().zero_fields))


def _levels(config) -> list:
    """The config and every nested sub-config (each level once)."""
    out, stack, seen = [], [config], set()
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        out.append(c)
        for v in vars(c).values():
            if hasattr(v, "to_dict") and hasattr(v, "model_type"):
                stack.append(v)
    return out


def _special_ids(config) -> set[int]:
    from harness.build.inputs import special_token_ids

    return special_token_ids(config)


def prepare_config(config) -> list[str]:
    """Zero every dropout-like probability and fill a missing pad token id, in place.
    Returns the changed fields (`level.field`), recorded by the load stage."""
    pat, changed = _pattern(), []
    taken = _special_ids(config)
    for level in _levels(config):
        prefix = getattr(level, "model_type", "") or "config"
        for key, value in list(vars(level).items()):
            if key.startswith("_") or isinstance(value, bool) or not isinstance(value, float):
                continue
            if value != 0.0 and pat.search(key):
                setattr(level, key, 0.0)
                changed.append(f"{prefix}.{key}")
        vocab = getattr(level, "vocab_size", None)
        if (
            train_mode_rules().fill_pad_token_id
            and "pad_token_id" in vars(level)
            and level.pad_token_id is None
            and isinstance(vocab, int)
            and vocab > 1
        ):
            if _fill_free_id(level, "pad_token_id", vocab, taken):
                changed.append(f"{prefix}.pad_token_id")
    changed += _fill_placeholder_ids(config, taken)
    return changed


def _fill_free_id(level, field: str, vocab: int, taken: set[int]) -> bool:
    """Give `level.field` the highest id below `vocab` that no other special id uses."""
    free = next((i for i in range(vocab - 1, 0, -1) if i not in taken), None)
    if free is None:
        return False
    setattr(level, field, free)
    taken.add(free)
    return True


def _fill_placeholder_ids(config, taken: set[int]) -> list[str]:
    """A multimodal config whose class defines a placeholder token field but leaves it None
    (BLIP-2, InstructBLIP: the processor's tokenizer adds the token in production) gets a free id
    below the text vocab, so the prompt can carry the placeholders the model looks for. Only when
    the model has that modality (its sub-config is there) and no sibling field names the token."""
    fields = train_mode_rules().fill_placeholder_token_ids
    try:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
    except ValueError:  # two text configs (MusicGen's text encoder and decoder): no single vocab
        return []
    vocab = getattr(text, "vocab_size", None)
    if not isinstance(vocab, int) or vocab <= 1:
        return []
    changed = []
    for rule in fields.values():
        if not any(getattr(config, f, None) is not None for f in rule.needs_any):
            continue
        for level in (config, text):
            names = [f for f in rule.fields if f in vars(level)]
            if names and all(getattr(level, f) is None for f in names):
                if _fill_free_id(level, names[0], vocab, taken):
                    changed.append(f"{getattr(level, 'model_type', '') or 'config'}.{names[0]}")
                break
            if names:
                break
    return changed


def zero_dropout_modules(model: torch.nn.Module) -> int:
    """p = 0 for dropout modules whose probability the config does not control."""
    n = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p:
            module.p = 0.0
            n += 1
    return n


def buffers_snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Buffers a train-mode forward may update (BatchNorm running stats), to restore afterwards."""
    return {name: buf.detach().clone() for name, buf in model.named_buffers() if buf is not None}


def restore_buffers(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name in saved and buf is not None and buf.shape == saved[name].shape:
                buf.copy_(saved[name])
