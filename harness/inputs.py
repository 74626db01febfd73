"""Valid, deterministic inputs for a tiny model, from what the model declares.

The forward signature says which inputs exist; the config says their sizes (vocab, image size and
channels, mel bins, conv strides); the class name says which labels the head's loss needs. Token
ids avoid every special/placeholder id of the config; attention masks pad the second sample;
multimodal prompts carry exactly as many placeholder tokens as the vision tower produces features
(asked from the model's own ``get_image_features``).

    >>> batch = make_inputs(model, config, "BertForMaskedLM", seed=0)
    >>> model(**batch.kwargs).loss
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.shrink import rules

BATCH = 2
CHOICES = 2


@dataclass
class ModelInputs:
    kwargs: dict[str, Any]
    labels: list[str] = field(default_factory=list)  # which kwargs are labels (a loss exists)
    notes: list[str] = field(default_factory=list)

    @property
    def has_labels(self) -> bool:
        return bool(self.labels)


def _signature(model) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _get(config, *names, default=None):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return default


def _subconfig(config, *names):
    for n in names:
        sub = getattr(config, n, None)
        if sub is not None and hasattr(sub, "to_dict"):
            return sub
    return None


def special_token_ids(config) -> set[int]:
    ids: set[int] = set()
    suffixes = tuple(rules()["token_id_suffixes"]) + ("pad_token_id", "bos_token_id", "eos_token_id")

    def walk(d: dict) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v)
            elif isinstance(k, str) and k.endswith(suffixes):
                if isinstance(v, int) and not isinstance(v, bool):
                    ids.add(v)
                elif isinstance(v, list):
                    ids.update(x for x in v if isinstance(x, int))

    walk(config.to_dict())
    return ids


class _Maker:
    def __init__(self, model, config, architecture: str, seed: int, seq: int):
        self.model, self.config, self.arch = model, config, architecture
        self.gen = torch.Generator().manual_seed(seed)
        self.seq = seq
        self.sig = _signature(model)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.text = text
        self.vocab = int(_get(text, "vocab_size", default=_get(config, "vocab_size", default=100)) or 100)
        self.special = special_token_ids(config)

    def ids(self, *shape: int) -> torch.Tensor:
        allowed = torch.tensor([i for i in range(min(self.vocab, 4096)) if i not in self.special and i > 2]
                               or list(range(self.vocab)))
        pick = torch.randint(0, len(allowed), shape, generator=self.gen)
        return allowed[pick]

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen)

    def mask(self, *shape: int) -> torch.Tensor:
        m = torch.ones(*shape, dtype=torch.long)
        if shape[0] > 1 and shape[-1] > 4:
            m[1, ..., -3:] = 0  # pad the end of the second sample
        return m

    def labels_of(self, n: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, max(1, n), shape, generator=self.gen)


def _image_shape(config) -> tuple[int, int, int]:
    vision = _subconfig(config, "vision_config", "backbone_config", "encoder_config") or config
    size = _get(vision, "image_size", "img_size", default=_get(config, "image_size", default=32))
    if isinstance(size, (list, tuple)):
        h, w = int(size[0]), int(size[-1])
    elif isinstance(size, dict):
        h, w = int(size.get("height", 32)), int(size.get("width", 32))
    else:
        h = w = int(size)
    channels = int(_get(vision, "num_channels", "in_channels", "in_chans", default=_get(config, "num_channels", default=3)))
    return channels, h, w


def _audio_samples(config) -> int:
    strides = _get(config, "conv_stride", default=None)
    kernels = _get(config, "conv_kernel", default=None)
    if isinstance(strides, (list, tuple)) and isinstance(kernels, (list, tuple)):
        return int(math.prod(strides) * 16 + sum(kernels) * math.prod(strides[:1]))
    return 4000


def _image_features_count(model, kwargs: dict) -> int | None:
    """How many placeholder tokens the model expects: ask its own vision tower."""
    fn = getattr(model, "get_image_features", None) or getattr(getattr(model, "model", None), "get_image_features", None)
    if fn is None:
        return None
    extra = {k: kwargs[k] for k in ("image_grid_thw", "image_sizes") if k in kwargs}
    with torch.no_grad():
        out = fn(pixel_values=kwargs["pixel_values"], **extra)
    if hasattr(out, "pooler_output") and out.pooler_output is not None:
        out = out.pooler_output
    elif hasattr(out, "last_hidden_state"):
        out = out.last_hidden_state
    if isinstance(out, (list, tuple)):
        return sum(int(o.reshape(-1, o.shape[-1]).shape[0]) for o in out) // BATCH
    if isinstance(out, torch.Tensor):
        return int(out.reshape(-1, out.shape[-1]).shape[0]) // BATCH
    return None


def make_inputs(model, config, architecture: str, seed: int = 0, seq: int | None = None) -> ModelInputs:
    """Inputs for `model.forward`, deterministic for a seed. Never raises for a missing recipe:
    what it cannot build is left out and noted (the forward stage then reports the model's error)."""
    seq = seq or rules()["targets"]["test_sequence_length"]
    m = _Maker(model, config, architecture, seed, seq)
    sig, kw, notes, labels = m.sig, {}, [], []
    b = BATCH
    multiple_choice = architecture.endswith("ForMultipleChoice")
    shape = (b, CHOICES, seq) if multiple_choice else (b, seq)

    if "input_ids" in sig:
        kw["input_ids"] = m.ids(*shape)
        if "attention_mask" in sig:
            kw["attention_mask"] = m.mask(*shape)
        if "token_type_ids" in sig:
            kw["token_type_ids"] = torch.zeros(*shape, dtype=torch.long)
    if "pixel_values" in sig:
        c, h, w = _image_shape(config)
        vision = _subconfig(config, "vision_config") or config
        if "image_grid_thw" in sig:  # qwen-vl: flattened patches + (t, h, w) grid per image
            p = int(_get(vision, "patch_size", default=14))
            tp = int(_get(vision, "temporal_patch_size", default=2))
            merge = int(_get(vision, "spatial_merge_size", default=2))
            gh = gw = 2 * merge
            kw["image_grid_thw"] = torch.tensor([[1, gh, gw]] * b)
            kw["pixel_values"] = m.randn(b * gh * gw, c * tp * p * p)
        else:
            kw["pixel_values"] = m.randn(b, c, h, w)
        if "pixel_mask" in sig:
            kw["pixel_mask"] = torch.ones(b, h, w, dtype=torch.long)
    if "input_values" in sig:
        kw["input_values"] = m.randn(b, _audio_samples(config))
        if "attention_mask" in sig and "input_ids" not in sig:
            kw["attention_mask"] = torch.ones_like(kw["input_values"], dtype=torch.long)
    if "input_features" in sig:
        mel = _get(config, "num_mel_bins", "feature_size", "input_feat_per_channel", default=80)
        src = _get(config, "max_source_positions", default=None)
        if src:  # whisper layout: (batch, mel, 2 * source positions)
            kw["input_features"] = m.randn(b, int(mel), 2 * int(src))
        else:  # (batch, frames, features)
            chans = int(_get(config, "input_channels", default=1))
            kw["input_features"] = m.randn(b, 64, int(mel) * chans)
    image_token = _get(config, "image_token_id", "image_token_index")
    if image_token is not None and "pixel_values" in kw and "input_ids" in kw:
        try:
            n = _image_features_count(model, kw)
        except Exception as exc:  # noqa: BLE001 - the forward stage will show the real error
            n = None
            notes.append(f"image feature count unknown: {type(exc).__name__}")
        if n:
            ids = torch.cat([torch.full((b, n), int(image_token)), kw["input_ids"]], dim=1)
            kw["input_ids"] = ids
            if "attention_mask" in kw:
                kw["attention_mask"] = torch.cat([torch.ones(b, n, dtype=torch.long), kw["attention_mask"]], 1)
            if "token_type_ids" in kw:
                kw["token_type_ids"] = torch.zeros_like(ids)
            if "mm_token_type_ids" in sig:  # 1 marks image positions (qwen-vl)
                kw["mm_token_type_ids"] = (ids == int(image_token)).long()
            notes.append(f"{n} image placeholder tokens")
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in sig and "input_ids" in kw or (
        "decoder_input_ids" in sig and ("input_features" in kw or "input_values" in kw)
    ):
        kw["decoder_input_ids"] = m.ids(b, seq // 2)
    if "use_cache" in sig:
        kw["use_cache"] = False
    if "return_dict" in sig:
        kw["return_dict"] = True
    labels = _labels(m, architecture, config, kw, sig)
    return ModelInputs(kwargs=kw, labels=labels, notes=notes)


def _labels(m: _Maker, arch: str, config, kw: dict, sig: set[str]) -> list[str]:
    b, num_labels = BATCH, int(getattr(config, "num_labels", 2) or 2)
    out: list[str] = []
    if arch.endswith(("ForQuestionAnswering",)) and "start_positions" in sig:
        kw["start_positions"] = m.labels_of(m.seq, b)
        kw["end_positions"] = m.labels_of(m.seq, b)
        return ["start_positions", "end_positions"]
    if "labels" not in sig:
        return out
    if arch.endswith(("ForSequenceClassification", "ForImageClassification", "ForAudioClassification",
                      "ForVideoClassification", "ForImageClassificationWithTeacher", "ForNextSentencePrediction")):
        kw["labels"] = m.labels_of(num_labels, b)
    elif arch.endswith("ForMultipleChoice"):
        kw["labels"] = m.labels_of(CHOICES, b)
    elif arch.endswith(("ForTokenClassification", "ForAudioFrameClassification")):
        length = kw["input_ids"].shape[-1] if "input_ids" in kw else m.seq
        kw["labels"] = m.labels_of(num_labels, b, length)
    elif arch.endswith("ForCTC"):
        kw["labels"] = torch.randint(1, max(2, m.vocab), (b, 4), generator=m.gen)
    elif "decoder_input_ids" in kw:
        kw["labels"] = m.ids(*kw["decoder_input_ids"].shape)
    elif arch.endswith(("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration", "ForPreTraining",
                        "ForImageTextToText", "ForVision2Seq")) and "input_ids" in kw:
        labels = kw["input_ids"].clone()
        if "attention_mask" in kw:
            labels[kw["attention_mask"] == 0] = -100
        labels[labels >= m.vocab] = -100
        for special in m.special:
            labels[labels == special] = -100
        kw["labels"] = labels
        if arch.endswith("ForPreTraining") and "next_sentence_label" in sig:
            kw["next_sentence_label"] = m.labels_of(2, b)
            out.append("next_sentence_label")
    else:
        return out
    out.append("labels")
    return out
