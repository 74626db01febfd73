"""What every input builder shares: the seeded generator, the config scope, the record of inputs.

`Maker` makes seeded tensors (token ids that avoid special ids, padded attention masks, floats);
`ConfigScope` lets recipe formulas name config fields (top level first, then the text, vision and
audio sub-configs); `ModelInputs` is what `make_inputs` returns, with the provenance of each
input (`sources`) so a report can say whether the processor, a recipe or the generic
synthesizer produced it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

BATCH = 2
CHOICES = 2
SUBCONFIG_NAMES = {
    "text": ("text_config", "decoder", "text_encoder", "language_config", "llm_config"),
    "vision": ("vision_config", "backbone_config", "encoder", "vision_encoder_config", "image_config"),
    "audio": ("audio_config", "audio_encoder_config", "speech_config", "encoder_config", "acoustic_config"),
}


@dataclass
class ModelInputs:
    kwargs: dict[str, Any]
    labels: list[str] = field(default_factory=list)  # which kwargs are labels (a loss exists)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # input name -> processor:X | recipe:X | synthetic
    set_aside: dict[str, Any] = field(default_factory=dict)  # processor outputs no input took (yet)

    @property
    def has_labels(self) -> bool:
        return bool(self.labels)


def get(config, *names, default=None):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return default


def subconfig(config, *names):
    for n in names:
        sub = getattr(config, n, None)
        if sub is not None and hasattr(sub, "to_dict"):
            return sub
    return None


def text_config(config):
    """The config's text config: itself, or its one text sub-config. A config with two (MusicGen's
    text encoder and its decoder) makes `get_text_config()` ambiguous: the text input's (the
    encoder's) is taken, as `input_ids` go to it."""
    if not hasattr(config, "get_text_config"):
        return config
    try:
        return config.get_text_config()
    except ValueError:
        return config.get_text_config(encoder=True)


def wrapped_configs(config) -> list:
    """The whole-model configs a wrapper config holds (ColPali's `vlm_config`): config-valued
    attributes, in definition order."""
    return [v for v in vars(config).values() if hasattr(v, "to_dict") and hasattr(v, "model_type")]


def signature_parameters(fn) -> dict[str, inspect.Parameter]:
    """`fn`'s parameters by name; {} for a callable without an inspectable signature."""
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def forward_parameters(model) -> dict[str, inspect.Parameter]:
    return signature_parameters(model.forward)


def required_inputs(params: dict[str, inspect.Parameter]) -> set[str]:
    return {
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and n != "self"
    }


def _nested_configs(levels: list[Any], depth: int = 2) -> list[Any]:
    """Sub-configs below `levels`, breadth first (`audio_config.asr_config.num_mel_bins`): looked
    at only after the config and its text/vision/audio sub-configs, so they never shadow those."""
    from transformers import PretrainedConfig

    seen = {id(c) for c in levels}
    found: list[Any] = []
    frontier = list(levels)
    for _ in range(depth):
        nxt = []
        for level in frontier:
            for v in vars(level).values():
                if isinstance(v, PretrainedConfig) and id(v) not in seen:
                    seen.add(id(v))
                    nxt.append(v)
        found.extend(nxt)
        frontier = nxt
    return found


class ConfigScope(Mapping):
    """Names a recipe formula may use: batch/seq/vocab, `config`, `text`/`vision`/`audio`
    sub-configs, then any field of the config, its text, vision or audio sub-config, then of the
    sub-configs nested below those (first found)."""

    def __init__(self, config, **extra: Any):
        self.config = config
        self.levels = [config]
        self.named: dict[str, Any] = {"config": config, **extra}
        for kind, names in SUBCONFIG_NAMES.items():
            sub = subconfig(config, *names)
            if kind == "text" and sub is None:
                sub = text_config(config)
            if sub is not None:
                self.named[kind] = sub
                self.levels.append(sub)
        self.levels.extend(_nested_configs(self.levels))

    def __getitem__(self, key: str) -> Any:
        if key in self.named:
            return self.named[key]
        for level in self.levels:
            v = getattr(level, key, None)
            if v is not None:
                return v
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
            return True
        except KeyError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self.named)

    def __len__(self) -> int:
        return len(self.named)


class Maker:
    """Seeded tensors for one model; the same seed gives the same inputs."""

    def __init__(self, config, seed: int, seq: int, special: set[int]):
        self.gen = torch.Generator().manual_seed(seed)
        self.seq = seq
        text = text_config(config)
        if get(text, "vocab_size") is None:  # a wrapper of a text model (FastSpeech2 + HiFi-GAN:
            text = next(
                (c for c in wrapped_configs(config) if get(c, "vocab_size") is not None), text
            )  # model_config)
        self.text = text
        self.vocab = int(get(text, "vocab_size", default=get(config, "vocab_size", default=100)) or 100)
        self.special = special
        pad = get(text, "pad_token_id", default=get(config, "pad_token_id"))
        self.pad = int(pad) if isinstance(pad, int) and 0 <= pad < self.vocab else None

    def ids(self, *shape: int, high: int | None = None) -> torch.Tensor:
        top = min(high or self.vocab, 4096)
        allowed = torch.tensor([i for i in range(top) if i not in self.special and i > 2] or list(range(top)))
        pick = torch.randint(0, len(allowed), shape, generator=self.gen)
        return allowed[pick]

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen)

    def rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=self.gen)

    def mask(self, *shape: int) -> torch.Tensor:
        m = torch.ones(*shape, dtype=torch.long)
        if shape[0] > 1 and shape[-1] > 4:
            m[1, ..., -3:] = 0  # pad the end of the second sample
        return m

    def pad_ids(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Padded positions carry the pad id, as a tokenizer's right padding would."""
        if self.pad is None or mask.shape != ids.shape:
            return ids
        return torch.where(mask.bool(), ids, torch.full_like(ids, self.pad))

    def labels_of(self, n: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, max(1, n), shape, generator=self.gen)

    def numpy_uint8(self, *shape: int):
        return torch.randint(0, 256, shape, generator=self.gen, dtype=torch.uint8).numpy()

    def numpy_float(self, *shape: int):
        return (torch.rand(*shape, generator=self.gen) * 2 - 1).numpy()
