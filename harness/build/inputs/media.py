"""Images, videos and audio for a model: from its own processor when it has one, else synthetic.

Each builder fills `ModelInputs.kwargs` and records the source of every tensor it adds.
"""

from __future__ import annotations

import inspect
import math
import re

import torch

from harness.build.formula import defined, evaluate
from harness.build.inputs.base import BATCH, ConfigScope, Maker, ModelInputs, get, subconfig, wrapped_configs
from harness.build.inputs.processors import image_input_name, processor_inputs, video_only
from harness.build.inputs.recipes import image_processor_name
from harness.build.rules import input_recipes

VISION_LEVELS = (
    "vision_config",
    "image_config",
    "backbone_config",
    "encoder_config",
    "encoder",
    "vision_encoder_config",
)
OWN_VISION_LEVELS = ("vision_config", "image_config", "encoder_config", "encoder", "vision_encoder_config")


def vision_level(config, levels=VISION_LEVELS):
    """The config level that describes the images: the first of `levels`, descended while that
    level nests another (t5gemma2: config.encoder.vision_config) and names no image size itself."""
    level = subconfig(config, *levels)
    if level is None:  # a wrapper of a whole model (ColPali: config.vlm_config.vision_config)
        inner = [v for v in wrapped_configs(config) if subconfig(v, *levels) is not None]
        level = subconfig(inner[0], *levels) if inner else None
    for _ in range(3):
        if level is None or get(level, "image_size", "img_size") is not None:
            break
        deeper = subconfig(level, *levels)
        if deeper is None:
            break
        level = deeper
    return level


def image_shape(config) -> tuple[int, int, int]:
    """(channels, height, width) the model takes. A swappable backbone's image_size is nominal
    (DETR-like models take any size): those get at least `min_backbone_image_size`, so every
    feature level of a stride-64 pyramid keeps some pixels."""
    vision = vision_level(config) or config
    size = get(vision, "image_size", "img_size", default=get(config, "image_size", default=32))
    formula = input_recipes().image_size_by_type.get(str(getattr(config, "model_type", "")))
    if formula:  # the image the processor makes is part of what the config sizes (SegGPT's pair)
        size = evaluate(formula, ConfigScope(config))
    if isinstance(size, (list, tuple)):
        h, w = int(size[0]), int(size[-1])
    elif isinstance(size, dict):
        h, w = int(size.get("height", 32)), int(size.get("width", 32))
    else:
        h = w = int(size)
    if not _has_fixed_size(config) and subconfig(config, "backbone_config") is not None:
        low = input_recipes().min_backbone_image_size
        h, w = max(h, low), max(w, low)
    channels = int(
        get(vision, "num_channels", "in_channels", "in_chans", default=get(config, "num_channels", default=3))
    )
    return channels, h, w


def _has_fixed_size(config) -> bool:
    """Whether the model's own vision level (not a swappable backbone) names an image size."""
    vision = vision_level(config, OWN_VISION_LEVELS) or config
    return get(vision, "image_size", "img_size") is not None


def modality_absent(config, kind: str) -> bool:
    """The config has a slot for the modality's sub-config and it is empty (Gemma-4's default has
    `vision_config: None`, `audio_config: None`): the model built no tower, it takes no such input."""
    fields = [f for f in input_recipes().modality_configs[kind] if f in vars(config)]
    return bool(fields) and all(getattr(config, f) is None for f in fields)


def frame_count(config) -> int | None:
    v = input_recipes().video
    vision = vision_level(config)
    for level in ([vision] if vision is not None else []) + [config]:
        n = get(level, *v.frame_fields)
        if isinstance(n, int) and n > 0:
            return n
    return None


def _take(
    out: ModelInputs,
    tensors: dict[str, torch.Tensor],
    sig: set[str],
    source: str,
    rename: dict[str, str] | None = None,
) -> list[str]:
    taken = []
    for key, value in tensors.items():
        name = (rename or {}).get(key, key)
        if name in sig and name not in out.kwargs:
            out.kwargs[name] = value
            out.sources[name] = source
            taken.append(name)
    return taken


def _grid_patches(m: Maker, config, frames: int, model_type: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """qwen-vl layout: flattened patches plus a (t, h, w) grid per sample. Types listed (or fed by
    an image processor listed) under `grid_patch_layouts: merged_channels_last` (inkling2) take
    one (p*merge, p*merge, channels) image block per merged token instead."""
    c, _, _ = image_shape(config)
    vision = subconfig(config, "vision_config") or config
    p = int(get(vision, "patch_size", default=14))
    tp = int(get(vision, "temporal_patch_size", default=2))
    merge = int(get(vision, "spatial_merge_size", default=2))
    gh = gw = 2 * merge
    # one temporal patch (= temporal_patch_size frames) per video: qwen2-vl counts a video's
    # placeholders as one run, qwen3-vl/3.5 as one run per temporal patch (timestamps between
    # them); with t = 1 both layouts agree
    t = 1
    grid = torch.tensor([[t, gh, gw]] * BATCH)
    layouts = input_recipes().grid_patch_layouts
    layout = layouts.get(model_type) or layouts.get(image_processor_name(model_type))
    if layout == "patches_channels_first":
        return m.randn(BATCH * t * gh * gw, c, p, p), grid
    if layout == "merged_channels_last":
        # the grid counts merged tokens here
        grid = torch.tensor([[t, gh // merge, gw // merge]] * BATCH)
        return m.randn(BATCH * t * (gh // merge) * (gw // merge), p * merge, p * merge, c), grid
    return m.randn(BATCH * t * gh * gw, c * tp * p * p), grid


_CLIP_UNPACK = re.compile(r"^\s*\w+, *(\w+), *\w+, *\w+, *\w+ = pixel_values\.shape", re.M)


def takes_clips(model) -> bool:
    """The forward unpacks a frame axis from its pixels (`batch_size, num_frames, num_channels,
    height, width = pixel_values.shape`: X-CLIP, TimeSformer). Read from the model's own forward,
    not from a frame count in its config (Perceiver's top-level `num_frames` is its multimodal
    autoencoder's: its image classifiers take images)."""
    for owner in (model, getattr(model, "model", None)):
        try:
            source = inspect.getsource(type(owner).forward) if owner is not None else ""
        except (OSError, TypeError):
            continue
        if any("frame" in axis for axis in _CLIP_UNPACK.findall(source)):
            return True
    return False


def _per_clip(tensors: dict[str, torch.Tensor], frames: int) -> dict[str, torch.Tensor]:
    """An image processor given clips returns their frames as one flat stack (CLIP's, which
    X-CLIP maps to): regrouped per clip, (batch, frames, C, H, W)."""
    pv = tensors.get("pixel_values")
    if pv is None or pv.dim() != 4 or pv.shape[0] != BATCH * frames:
        return tensors
    return {**tensors, "pixel_values": pv.reshape(BATCH, frames, *pv.shape[1:])}


def add_images(
    out: ModelInputs,
    m: Maker,
    config,
    scope: ConfigScope,
    sig: set[str],
    model_type: str,
    clips: bool = False,
) -> None:
    """`clips`: the model's forward takes (batch, frames, ...) pixels (`takes_clips`)."""
    if "pixel_values" not in sig:
        # a forward that takes its processor's own layout instead (Pix2Struct's flattened patches)
        name = image_input_name(model_type, input_recipes().processors.classes.image)
        if name in sig and name not in out.kwargs and not modality_absent(config, "image"):
            _processor_layout(out, m, config, scope, sig, model_type)
        return
    if "pixel_values" in out.kwargs or modality_absent(config, "image"):
        return
    c, h, w = image_shape(config)
    rules = input_recipes()
    frames = frame_count(config) if defined(rules.video.pixel_values_is_video_when, scope) else None
    if not frames and video_only(model_type) and not {"image_grid_thw", "grid_thw"} & sig:
        frames = frame_count(config) or rules.video.default_frames
    kind = "video" if frames else "image"
    proc = processor_inputs(kind, model_type, scope, m, rules.processors, c, h, w, frames)
    if proc is not None and proc.tensors and frames and clips:
        proc.tensors = _per_clip(proc.tensors, frames)
    if proc is not None and proc.tensors:
        pv = proc.tensors.get("pixel_values")
        # a processor that also says each image's grid/size packs or tiles the pixels itself
        dynamic = any(n in proc.tensors for n in rules.processors.image.layout_outputs)
        if (
            pv is not None
            and pv.dim() in (4, 5)
            and _has_fixed_size(config)
            and not dynamic
            and tuple(pv.shape[-2:]) != (h, w)
        ):
            out.notes.append(
                f"{proc.name} gave {tuple(pv.shape[-2:])}, the model takes {(h, w)}: synthetic pixels"
            )
        elif pv is not None and (
            "image_grid_thw" not in proc.tensors or "image_grid_thw" in sig or "grid_thw" in sig
        ):
            _take(out, proc.tensors, sig, f"processor:{proc.name}")
            layout = rules.processors.layouts.get(model_type)
            if layout == "per_image_padded_patches":
                _pad_patches_per_image(out)
            elif layout == "target_grid_per_sample" and "images_per_sample" in sig:
                _add_target_grids(out)
            return
    elif proc is not None and proc.error:
        out.notes.append(f"{proc.name} failed: {proc.error}")
    if "image_grid_thw" in sig or "grid_thw" in sig:
        out.kwargs["pixel_values"], out.kwargs["image_grid_thw"] = _grid_patches(m, config, 1, model_type)
        out.sources["pixel_values"] = out.sources["image_grid_thw"] = "synthetic"
    elif frames:
        out.kwargs["pixel_values"] = m.randn(BATCH, frames, c, h, w)
        out.sources["pixel_values"] = "synthetic"
    else:
        out.kwargs["pixel_values"] = m.randn(BATCH, c, h, w)
        out.sources["pixel_values"] = "synthetic"
    if "pixel_mask" in sig:
        out.kwargs["pixel_mask"] = torch.ones(BATCH, h, w, dtype=torch.long)
        out.sources["pixel_mask"] = "synthetic"


def _processor_layout(
    out: ModelInputs, m: Maker, config, scope: ConfigScope, sig: set[str], model_type: str
) -> None:
    """Inputs only the image processor makes (no synthetic fallback knows their layout)."""
    c, h, w = image_shape(config)
    proc = processor_inputs("image", model_type, scope, m, input_recipes().processors, c, h, w)
    if proc is not None and proc.tensors:
        _take(out, proc.tensors, sig, f"processor:{proc.name}")
    elif proc is not None and proc.error:
        out.notes.append(f"{proc.name} failed: {proc.error}")


def _add_target_grids(out: ModelInputs) -> None:
    """Each sample's image grids followed by the grid of the image to generate, and how many
    grids each sample has (`images_per_sample`): the layout GLM-Image's processor makes in its
    image-to-image mode (the model encodes all grids of a sample but its last)."""
    grid = out.kwargs.get("image_grid_thw")
    if not isinstance(grid, torch.Tensor) or grid.dim() != 2 or grid.shape[0] % BATCH:
        return
    per_sample = grid.split(grid.shape[0] // BATCH)
    out.kwargs["image_grid_thw"] = torch.cat([torch.cat([g, g[-1:]]) for g in per_sample])
    out.kwargs["images_per_sample"] = torch.tensor([len(g) + 1 for g in per_sample], dtype=torch.long)
    out.sources["images_per_sample"] = out.sources.get("image_grid_thw", "synthetic") + "+target_grid"


def _pad_patches_per_image(out: ModelInputs) -> None:
    """(all patches, dim) -> (images, most patches, dim), zero-padded: the layout a retrieval
    processor (ColQwen2's) makes from the qwen-vl image processor's output so it can batch."""
    pv, grid = out.kwargs.get("pixel_values"), out.kwargs.get("image_grid_thw")
    if not isinstance(pv, torch.Tensor) or pv.dim() != 2 or not isinstance(grid, torch.Tensor):
        return
    counts = [int(n) for n in grid.prod(-1)]
    padded = torch.zeros(len(counts), max(counts), pv.shape[-1], dtype=pv.dtype)
    for i, part in enumerate(pv.split(counts)):
        padded[i, : part.shape[0]] = part
    out.kwargs["pixel_values"] = padded


def add_videos(
    out: ModelInputs, m: Maker, config, scope: ConfigScope, sig: set[str], model_type: str
) -> None:
    """`pixel_values_videos` (video LLMs, video towers): video processors need torchvision, so the
    type's image processor makes the frames when it takes videos, else seeded floats."""
    name = next((n for n in input_recipes().video.inputs if n in sig), None)
    if name is None or name in out.kwargs or modality_absent(config, "video"):
        return
    frames = frame_count(config) or input_recipes().video.default_frames
    if "video_grid_thw" in sig:
        patches, grid = _grid_patches(m, config, frames, model_type)
        images = out.kwargs.get("pixel_values")
        if isinstance(images, torch.Tensor) and images.dim() == 2 and patches.dim() == 2:
            # the tower that embeds the processor's image patches embeds the video's: same width
            patches = m.randn(patches.shape[0], images.shape[-1])
        out.kwargs[name], out.kwargs["video_grid_thw"] = patches, grid
        out.sources[name] = out.sources["video_grid_thw"] = "synthetic"
        return
    c, h, w = image_shape(config)
    proc = processor_inputs("video", model_type, scope, m, input_recipes().processors, c, h, w, frames)
    if proc is not None and "pixel_values" in proc.tensors and proc.tensors["pixel_values"].dim() == 5:
        pv = proc.tensors["pixel_values"]
        if not _has_fixed_size(config) or tuple(pv.shape[-2:]) == (h, w):
            out.kwargs[name] = pv
            out.sources[name] = f"processor:{proc.name}"
            return
    out.kwargs[name] = m.randn(BATCH, frames, c, h, w)
    out.sources[name] = "synthetic"


def _audio_get(scope: ConfigScope, *names, default=None):
    """A field of the audio level first (a composite's `audio_config.num_mel_bins`), then the
    config, its other sub-configs and the configs nested below them (a codec's
    `semantic_model_config`); never the text or vision sub-config's."""
    audio = scope.named.get("audio")
    others = [scope.named.get(k) for k in ("text", "vision") if scope.named.get(k) is not scope.config]
    levels = [audio] if audio is not None else []
    for level in levels + [c for c in scope.levels if not any(c is o for o in others)]:
        v = get(level, *names)
        if v is not None:
            return v
    return default


def _audio_samples(scope: ConfigScope) -> int:
    strides = _audio_get(scope, "conv_stride")
    kernels = _audio_get(scope, "conv_kernel")
    if isinstance(strides, (list, tuple)) and isinstance(kernels, (list, tuple)):
        return int(math.prod(strides) * 16 + sum(kernels) * math.prod(strides[:1]))
    return 4000


AUDIO_MASK_NAMES = ("feature_attention_mask", "input_features_mask", "audio_attention_mask", "padding_mask")


def add_audio(out: ModelInputs, m: Maker, config, scope: ConfigScope, sig: set[str], model_type: str) -> None:
    wants = [n for n in ("input_features", "input_values") if n in sig and n not in out.kwargs]
    if not wants or modality_absent(config, "audio"):
        return
    proc = processor_inputs(
        "audio", model_type, scope, m, input_recipes().processors, equal_lengths="input_ids" in sig
    )
    if proc is not None and proc.tensors and any(k in proc.tensors for k in wants):
        rename = {}
        if "attention_mask" in proc.tensors and ("input_ids" in out.kwargs or "attention_mask" not in sig):
            target = next((n for n in AUDIO_MASK_NAMES if n in sig), None)
            rename["attention_mask"] = target or "__unused__"
            if target is None:  # the text's mask holds the name; the audio's is kept aside
                out.set_aside["audio_attention_mask"] = proc.tensors["attention_mask"]
        _take(out, proc.tensors, sig, f"processor:{proc.name}", rename)
        return
    if proc is not None and proc.error:
        out.notes.append(f"{proc.name} failed: {proc.error}")
    _synthetic_audio(out, m, scope, sig, wants)


def _synthetic_audio(out: ModelInputs, m: Maker, scope: ConfigScope, sig: set[str], wants: list[str]) -> None:
    """Audio when no feature extractor works here. A codec that takes a waveform and semantic
    features of it (XCodec2, NeuCodec) gets them aligned: one feature frame per hop of its
    acoustic encoder, the waveform (batch, 1, samples) as its extractor pads it."""
    synthetic = input_recipes().synthetic_audio
    frames = synthetic.frames
    width = _audio_get(scope, *synthetic.width_fields)
    hop = (
        _audio_get(scope, *synthetic.hop_fields) if {"input_values", "input_features"} <= set(wants) else None
    )
    if "input_values" in wants:
        channels = _audio_get(scope, *synthetic.channel_fields, default=1 if hop else None)
        samples = frames * int(hop) if hop else _audio_samples(scope)
        shape = (BATCH, int(channels), samples) if channels else (BATCH, samples)
        out.kwargs["input_values"] = m.randn(*shape)
        out.sources["input_values"] = "synthetic"
        if "attention_mask" in sig and "input_ids" not in sig:
            out.kwargs["attention_mask"] = torch.ones_like(out.kwargs["input_values"], dtype=torch.long)
            out.sources["attention_mask"] = "synthetic"
    if "input_features" in wants:
        mel = _audio_get(scope, *synthetic.mel_fields, default=80)
        src = None if width else _audio_get(scope, "max_source_positions")
        if src:  # whisper layout: (batch, mel, 2 * source positions)
            out.kwargs["input_features"] = m.randn(BATCH, int(mel), 2 * int(src))
        else:  # (batch, frames, features): the model's input width, else mel bins x stacked frames
            chans = int(_audio_get(scope, *synthetic.feature_multipliers, default=1))
            out.kwargs["input_features"] = m.randn(BATCH, frames, int(width) if width else int(mel) * chans)
        out.sources["input_features"] = "synthetic"
        frames = out.kwargs["input_features"].shape[-1 if src else 1]
        mask = next(
            (n for n in AUDIO_MASK_NAMES if n in sig and n not in out.kwargs and n != "padding_mask"), None
        )
        if mask:  # a feature extractor returns one: every frame is valid
            out.kwargs[mask] = torch.ones(BATCH, frames, dtype=torch.long)
            out.sources[mask] = "synthetic"
