"""Inputs from a model's own image processor or feature extractor (harness.build.inputs.processors):
which class feeds a type, how it is sized to the shrunk config, and spectrograms padded as the
model's processor pads them. Each on a real architecture."""

from __future__ import annotations

import pytest
import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.inputs.processors import pad_frames
from harness.build.models import build_model, resolve_config
from harness.stages.check import check_model
from tests.harness.build.helpers import (
    built,
    runs,
    trains,
)


def test_pad_frames_pads_the_frame_axis_and_its_mask():
    feats, mask = torch.ones(2, 26, 4), torch.ones(2, 26, dtype=torch.long)
    out = pad_frames({"input_features": feats, "attention_mask": mask}, 8)
    assert out["input_features"].shape == (2, 32, 4) and out["attention_mask"].shape == (2, 32)
    assert out["input_features"][:, 26:].abs().sum() == 0 and out["attention_mask"][:, 26:].sum() == 0
    no_mask = pad_frames({"input_features": feats}, 8)  # without a mask: axis 1
    assert no_mask["input_features"].shape == (2, 32, 4)
    same = pad_frames({"input_features": feats[:, :24], "attention_mask": mask[:, :24]}, 8)
    assert same["input_features"].shape == (2, 24, 4)


def test_a_speech_llm_that_stacks_frames_runs_with_its_feature_extractor_inputs():
    """nemo_speechlm (Nemotron 3.5 Transcribe): mel bins two sub-configs down, and a frame count
    the model requires to be a multiple of `subsampling_factor` (its processor pads to it)."""
    spec = ModelSpec("test/nemo_speechlm", "nemo_speechlm", "Nemotron3_5TranscribeForConditionalGeneration")
    result = check_model(spec, backend="cpu", stages=["load", "forward", "backward"])
    bad = {s: r.reason for s, r in result.stages.items() if r.status.value != "pass"}
    assert not bad, bad
    sources = result.stages["load"].metrics["input_sources"]
    assert sources["input_features"].startswith("processor:")


def test_a_part_of_a_composite_model_is_fed_by_the_composites_processor():
    from harness.build.inputs.processors import composite_type, feature_extractor_class

    assert composite_type("qwen3_omni_moe_thinker") == "qwen3_omni_moe"
    assert composite_type("bert") is None
    assert feature_extractor_class("qwen3_omni_moe_thinker", {}).__name__ == "WhisperFeatureExtractor"


def test_whisper_features_have_the_encoder_length():
    _, cfg, batch = built("whisper", "WhisperForConditionalGeneration")
    assert batch.kwargs["input_features"].shape == (2, cfg.num_mel_bins, 2 * cfg.max_source_positions)


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("glmasr", "GlmAsrForConditionalGeneration"),  # Whisper's extractor, a rotary encoder
        ("glmasr_encoder", "GlmAsrEncoder"),
    ],
)
def test_an_extractor_length_formula_naming_a_missing_field_falls_back(model_type, architecture):
    # the Whisper extractor's length is 2 x max_source_positions frames; GLM-ASR's encoder has
    # none, so the next formula gives whole groups of 8 frames (its conv halves, its projector
    # merges 4) instead of a synthetic fallback with the wrong mel count
    model, cfg, inputs = built(model_type, architecture)
    assert inputs.sources["input_features"] == "processor:WhisperFeatureExtractor"
    feats = inputs.kwargs["input_features"]
    assert feats.shape[1] == 128 and feats.shape[-1] % 8 == 0
    trains(model, inputs)


def test_a_processor_asked_for_what_the_pretraining_loss_needs():
    # FLAVA's image processor makes the codebook's pixels and the masked-patch mask on request,
    # sized to the model's patch grid (one codebook token per patch)
    model, cfg, inputs = built("flava", "FlavaForPreTraining")
    kw = inputs.kwargs
    side = cfg.image_config.image_size // cfg.image_config.patch_size
    assert inputs.sources["codebook_pixel_values"] == inputs.sources["pixel_values"]
    assert tuple(kw["bool_masked_pos"].shape[-2:]) == (side, side)
    assert kw["codebook_pixel_values"].shape[-1] == 8 * side
    trains(model, inputs)


def test_an_extractor_sized_like_whispers_under_its_own_name():
    # MOSS's extractor is Whisper's under another name: the same frame count rule (2 x source
    # positions), its `set` formulas naming the built extractor (`fe.hop_length`)
    model, cfg, inputs = built("moss_transcribe_diarize_audio", "MossTranscribeDiarizeAudioModel")
    assert inputs.kwargs["input_features"].shape[-1] == 2 * cfg.max_source_positions
    trains(model, inputs)


def test_a_torchvision_only_processor_replaced_by_the_pil_one_making_its_layout():
    # LFM2-VL's processor needs torchvision; its SigLIP-2 tower takes the flattened patches, their
    # spatial shapes and mask that SigLIP-2's PIL processor makes (at most the tower's patch grid)
    model, cfg, inputs = built("lfm2_vl", "Lfm2VlForConditionalGeneration")
    assert inputs.sources["pixel_values"] == "processor:Siglip2ImageProcessorPil"
    assert {"spatial_shapes", "pixel_attention_mask"} <= set(inputs.kwargs)
    v = cfg.vision_config
    assert inputs.kwargs["pixel_values"].shape[1] <= v.num_patches
    trains(model, inputs)


def test_a_type_sharing_a_processor_gets_its_siblings_image_layout():
    """ModernVBERT is fed by Idefics3Processor but maps no image processor; without one the
    synthesized 4-D `pixel_values` miss the (batch, images, channels, height, width) layout."""
    arch = "ModernVBertForSequenceClassification"
    config = resolve_config(ModelSpec("catalog/modernvbert", "modernvbert", arch))
    model = build_model(config, arch)
    inputs = make_inputs(model, config, arch)
    assert inputs.sources["pixel_values"].startswith("processor:Idefics3ImageProcessor")
    assert inputs.kwargs["pixel_values"].dim() == 5
    with torch.no_grad():
        model(**inputs.kwargs)


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("colpali", "ColPaliForRetrieval"),  # PaliGemma inside: SigLIP processor, 16 tokens
        ("colmodernvbert", "ColModernVBertForRetrieval"),  # maps no processor: its ModernVBERT's
    ],
)
def test_a_wrapper_model_is_fed_like_the_model_it_wraps(model_type, architecture):
    model, cfg, inputs = built(model_type, architecture)
    assert inputs.sources["pixel_values"].startswith("processor:")
    token = cfg.vlm_config.image_token_id
    assert ((inputs.kwargs["input_ids"] == token).sum(-1) > 0).all()
    runs(model, inputs)


def test_a_vision_config_without_a_temporal_patch_gets_single_frame_patches():
    # LLaVA-OneVision-1.5's vision tower embeds each patch with a Conv2d (its config names no
    # temporal_patch_size); the Qwen2-VL processor it is mapped to stacks 2 frames by default
    model, cfg, inputs = built("llava_onevision1_5_vision", "LlavaOnevision15VisionModel")
    assert inputs.sources["pixel_values"].startswith("processor:")
    assert inputs.kwargs["pixel_values"].shape[-1] == cfg.in_channels * cfg.patch_size**2
    runs(model, inputs)


def test_a_vision_config_with_a_temporal_patch_keeps_it():
    model, cfg, inputs = built("qwen2_vl", "Qwen2VLModel")
    vision = cfg.vision_config
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    assert vision.temporal_patch_size == 2 and inputs.kwargs["pixel_values"].shape[-1] == width
