"""Inputs from the model's own image processor / feature extractor, built from its defaults.

transformers says, per model type, which image processor and feature extractor the model is used
with in production (``IMAGE_PROCESSOR_MAPPING_NAMES``, ``FEATURE_EXTRACTOR_MAPPING_NAMES``). The
class is built from its defaults (never from the Hub), sized to the shrunk config (image size,
patch/merge sizes, mel bins; the rules are data: ``processors`` in input_recipes.yaml), fed seeded
synthetic raw data (images, video frames, a waveform), and its output tensors are the inputs.
Processors need torchvision for their fast variants, which is not installed: the PIL variants
are used. Tokenizers need files, so a processor that needs one is not built; its image or audio
part is. A processor that cannot be built or fails on the data returns None with a reason, and
the caller falls back to a recipe or the generic synthesizer.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.build.formula import evaluate
from harness.build.inputs.base import BATCH, ConfigScope, Maker
from harness.build.rules import Processors


def _real_tensors():
    """Processors work on numpy arrays: under a FakeTensorMode (the blame probe's unshrunk run) the
    raw data and the processor's output must stay real tensors (the fake mode accepts them)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


@dataclass
class ProcessorOutput:
    name: str  # class name, recorded as the source of every tensor it gave
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    error: str = ""


def _class_names(mapping_entry: Any) -> list[str]:
    """Candidate class names of one mapping entry, PIL/slow variant first (no torchvision here)."""
    if mapping_entry is None:
        return []
    if isinstance(mapping_entry, str):
        return [mapping_entry]
    if isinstance(mapping_entry, dict):
        return [n for key in ("pil", "slow", "torchvision", "fast") for n in [mapping_entry.get(key)] if n]
    return [n for n in mapping_entry if n]


def _resolve(names: list[str]):
    import transformers

    placeholder = None  # a class whose backend (torchvision) is missing: only when nothing else is
    for name in names:
        try:
            cls = getattr(transformers, name)
        except (AttributeError, ImportError):
            continue
        if isinstance(cls, type) and type(cls).__name__ == "DummyObject":
            placeholder = placeholder or cls
        elif isinstance(cls, type):
            return cls
    return placeholder


@functools.cache
def composite_type(model_type: str) -> str | None:
    """The model type whose config holds this one as a sub-config (qwen3_omni_moe_thinker ->
    qwen3_omni_moe, t5gemma2_encoder -> t5gemma2): a part of a composite model is fed by the
    composite's processor. Found by name prefix, confirmed by the composite's `sub_configs`."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    parts = model_type.split("_")
    for cut in range(len(parts) - 1, 0, -1):
        parent = "_".join(parts[:cut])
        if parent not in CONFIG_MAPPING_NAMES:
            continue
        try:
            subs = getattr(CONFIG_MAPPING[parent], "sub_configs", None) or {}
        except Exception:  # noqa: BLE001 - a config class that does not import here
            continue
        if any(getattr(sub, "model_type", None) == model_type for sub in subs.values()):
            return parent
        if model_type in _default_sub_types(parent):  # sub-configs declared as AutoConfig
            return parent
    return None


def _default_sub_types(model_type: str) -> set[str]:
    """Model types of the sub-configs the type's default config holds."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        config = CONFIG_MAPPING[model_type]()
    except Exception:  # noqa: BLE001 - a default that does not build: no answer
        return set()
    return {
        str(v.model_type)
        for v in vars(config).values()
        if hasattr(v, "to_dict") and getattr(v, "model_type", None)
    }


def _mapped(mapping: dict, model_type: str, overrides: dict, wrapper: bool = True) -> list[str]:
    names = _class_names(overrides.get(model_type)) or _class_names(mapping.get(model_type))
    parent = None if names else composite_type(model_type)
    names = names or (
        _class_names(overrides.get(parent)) or _class_names(mapping.get(parent)) if parent else []
    )
    names = names + [n for n in _processor_siblings(mapping, model_type) if n not in names]
    if not names and wrapper:
        # a wrapper type that maps nothing itself is fed by the processor of the model it wraps
        # (ColModernVBERT holds a ModernVBERT config: Idefics3's image processor)
        for sub in sorted(_default_sub_types(model_type)):
            names += [n for n in _mapped(mapping, sub, overrides, wrapper=False) if n not in names]
    return names


def _processor_siblings(mapping: dict, model_type: str) -> list[str]:
    """Classes of the types that share this type's processor (ModernVBERT and UltraVBERT are
    fed by `Idefics3Processor`, whose image processor idefics3 maps): later candidates, for a
    type that maps none or only one needing a missing package (torchvision)."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    proc = PROCESSOR_MAPPING_NAMES.get(model_type)
    if not proc:
        return []
    return [
        n
        for other, p in sorted(PROCESSOR_MAPPING_NAMES.items())
        if p == proc and other != model_type
        for n in _class_names(mapping.get(other))
    ]


def image_processor_class(model_type: str, overrides: dict):
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    return _resolve(_mapped(IMAGE_PROCESSOR_MAPPING_NAMES, model_type, overrides))


def image_input_name(model_type: str, overrides: dict) -> str:
    """The input the type's image processor makes for the model (its `model_input_names[0]`):
    `pixel_values` for almost all, Pix2Struct's `flattened_patches` (patches with their row and
    column ids)."""
    try:
        cls = image_processor_class(model_type, overrides)
        names = list(getattr(cls, "model_input_names", None) or []) if cls is not None else []
    except ImportError:  # a class whose backend is missing here
        names = []
    return str(names[0]) if names else "pixel_values"


def video_only(model_type: str) -> bool:
    """transformers maps a video processor and no image processor to the type (InstructBLIP-Video):
    its `pixel_values` are videos even when its config names no frame count."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.video_processing_auto import VIDEO_PROCESSOR_MAPPING_NAMES

    return model_type in VIDEO_PROCESSOR_MAPPING_NAMES and not _mapped(
        IMAGE_PROCESSOR_MAPPING_NAMES, model_type, {}
    )


def feature_extractor_class(model_type: str, overrides: dict):
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    return _resolve(_mapped(FEATURE_EXTRACTOR_MAPPING_NAMES, model_type, overrides))


def _formula_values(formulas: dict[Any, list[str]], scope: ConfigScope) -> dict[Any, Any]:
    """attr -> value of the first of its formulas whose fields the config has."""
    out = {}
    for attr, formula in formulas.items():
        for one in formula:
            try:
                out[attr] = evaluate(one, scope)
                break
            except (NameError, TypeError, KeyError, IndexError, ValueError, ZeroDivisionError):
                continue
    return out


def _init_kwargs(cls, values: dict[str, Any]) -> dict[str, Any]:
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return {}
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in params.values())
    return {k: v for k, v in values.items() if k in params or (takes_kwargs and False)}


def _size_dict(size: Any, height: int, width: int, keys: list[str]) -> Any:
    """The processor's size dict with every edge length set to the model's image size."""
    if size is None:
        return None
    if hasattr(size, "__dataclass_fields__") or (hasattr(size, "__dict__") and not isinstance(size, dict)):
        for key in keys:
            if getattr(size, key, None) is not None:
                setattr(
                    size,
                    key,
                    height
                    if key in ("height", "shortest_edge")
                    else width
                    if key == "width"
                    else max(height, width),
                )
        return size
    if isinstance(size, dict):
        return {
            k: (height if k in ("height", "shortest_edge") else width if k == "width" else max(height, width))
            if k in keys and v is not None
            else v
            for k, v in size.items()
        }
    if isinstance(size, int):
        return height
    return size


def build_image_processor(cls, scope: ConfigScope, height: int, width: int, rules: Processors):
    """The processor from its defaults, then sized: edges -> the model's image size (unless the
    processor sizes images by area: dynamic resolution), patch/merge sizes from the config."""
    r = rules.image
    values = _formula_values(r.attributes, scope)
    values.update(_formula_values(r.by_class.get(cls.__name__, {}), scope))
    proc = cls(**_init_kwargs(cls, values))
    for attr, v in values.items():
        if hasattr(proc, attr):
            setattr(proc, attr, v)
    dynamic = any(getattr(proc, a, None) is not None for a in r.dynamic_resolution_attributes)
    if not dynamic:
        for attr in r.size_attributes:
            if getattr(proc, attr, None) is not None:
                setattr(proc, attr, _size_dict(getattr(proc, attr), height, width, r.size_keys))
    for attr in r.disable:
        if getattr(proc, attr, None):
            setattr(proc, attr, False)
    return proc


def run_image_processor(
    proc,
    maker: Maker,
    channels: int,
    height: int,
    width: int,
    frames: int | None = None,
    extra: dict | None = None,
) -> dict[str, torch.Tensor]:
    """Seeded uint8 images (or videos of `frames` frames), channels last, as a camera gives them."""
    if frames:
        data = [[maker.numpy_uint8(height, width, channels) for _ in range(frames)] for _ in range(BATCH)]
    else:
        data = [maker.numpy_uint8(height, width, channels) for _ in range(BATCH)]
    kwargs = {"return_tensors": "pt", **(extra or {})}
    if channels == 1:
        kwargs.setdefault("input_data_format", "channels_last")
    out = proc(data, **kwargs)
    return {k: v for k, v in dict(out).items() if isinstance(v, torch.Tensor)}


def build_feature_extractor(cls, scope: ConfigScope, rules: Processors):
    r = rules.audio
    own = r.by_class.get(cls.__name__)
    values = _formula_values(r.init, scope)
    values.update(_formula_values(own.init if own else {}, scope))
    fe = cls(**_init_kwargs(cls, values))
    # `set` formulas may name the built extractor (`fe.hop_length`)
    local = ConfigScope(scope.config, **{k: v for k, v in scope.named.items() if k != "config"}, fe=fe)
    for attr, v in _formula_values(own.set if own else {}, local).items():
        setattr(fe, attr, v)
    return fe


def run_feature_extractor(
    fe, maker: Maker, scope: ConfigScope, rules: Processors, equal_lengths: bool = False
) -> dict[str, torch.Tensor]:
    """A seeded waveform per sample (the second one shorter, so padding is exercised, unless
    `equal_lengths`: a prompt then holds the same number of audio placeholders per sample)."""
    r = rules.audio
    own = r.by_class.get(type(fe).__name__)
    named = {k: v for k, v in scope.named.items() if k != "config"}
    local = ConfigScope(scope.config, **named, fe=fe, sampling_rate=getattr(fe, "sampling_rate", 16000))
    formulas = own.samples if own and own.samples is not None else r.samples
    # the first formula whose fields the model has (GLM-ASR's Whisper extractor: no source positions)
    values = _formula_values({"samples": formulas}, local)
    if not values:
        raise NameError(f"no waveform length formula applies: {formulas}")
    samples = int(values["samples"])
    channels = int(getattr(fe, "feature_size", 1) or 1) if type(fe).__name__ in r.multichannel_waveform else 1
    waves = []
    for i in range(BATCH):
        n = samples if i == 0 or equal_lengths else max(1, int(samples * r.second_sample_fraction))
        w = maker.numpy_float(n) if channels == 1 else maker.numpy_float(channels, n)
        waves.append(w)
    kwargs = dict(r.call)
    call_params = inspect.signature(fe.__call__).parameters
    kwargs = {
        k: v
        for k, v in kwargs.items()
        if k in call_params or any(p.kind == p.VAR_KEYWORD for p in call_params.values())
    }
    if "sampling_rate" in call_params:
        kwargs["sampling_rate"] = getattr(fe, "sampling_rate", 16000)
    out = fe(waves, return_tensors="pt", **kwargs)
    tensors = {k: v for k, v in dict(out).items() if isinstance(v, torch.Tensor)}
    multiple = own.frame_multiple if own else None
    if multiple:
        tensors = pad_frames(tensors, int(evaluate(multiple, local)))
    return tensors


def pad_frames(tensors: dict[str, torch.Tensor], multiple: int) -> dict[str, torch.Tensor]:
    """Zero-pad the frame axis of a spectrogram and its mask on the right to a multiple of
    `multiple`, as the processors of models that stack frames do (the extractor's own
    `pad_to_multiple_of` counts samples, and a centered STFT adds a frame). The frame axis is the
    mask's second one; without a mask, axis 1 of `input_features`."""
    feats = tensors.get("input_features")
    if feats is None or multiple <= 1:
        return tensors
    mask_name = next((k for k in ("attention_mask", "input_features_mask") if k in tensors), None)
    frames = tensors[mask_name].shape[1] if mask_name else feats.shape[1]
    pad = -frames % multiple
    if not pad:
        return tensors
    axis = next(i for i in range(1, feats.dim()) if feats.shape[i] == frames)
    out = dict(tensors)
    widths = [0, 0] * (feats.dim() - 1 - axis) + [0, pad]
    out["input_features"] = torch.nn.functional.pad(feats, widths)
    for name in ("attention_mask", "input_features_mask"):
        if name in tensors and tensors[name].dim() == 2:
            out[name] = torch.nn.functional.pad(tensors[name], [0, pad])
    return out


def processor_inputs(
    kind: str,
    model_type: str,
    scope: ConfigScope,
    maker: Maker,
    rules: Processors,
    channels: int = 3,
    height: int = 32,
    width: int = 32,
    frames: int | None = None,
    equal_lengths: bool = False,
) -> ProcessorOutput | None:
    """Run the model type's own processor of `kind` (image | video | audio); None when it has none."""
    overrides = rules.classes.audio if kind == "audio" else rules.classes.image
    if overrides.get(model_type, "") is None:  # the recipes say: this type's processor does not fit
        return None
    cls = (
        feature_extractor_class(model_type, overrides)
        if kind == "audio"
        else image_processor_class(model_type, overrides)
    )
    if cls is None:
        return None
    try:
        with _real_tensors():
            if kind == "audio":
                proc = build_feature_extractor(cls, scope, rules)
                tensors = run_feature_extractor(proc, maker, scope, rules, equal_lengths)
            else:
                proc = build_image_processor(cls, scope, height, width, rules)
                extra = _formula_values(rules.image.call_by_class.get(cls.__name__, {}), scope)
                tensors = run_image_processor(proc, maker, channels, height, width, frames, extra)
    except Exception as exc:  # noqa: BLE001 - a processor that does not work here: fall back
        return ProcessorOutput(cls.__name__, error=f"{type(exc).__name__}: {str(exc)[:160]}")
    return ProcessorOutput(cls.__name__, tensors)
