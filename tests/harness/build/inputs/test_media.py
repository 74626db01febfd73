"""Images, videos and audio (harness.build.inputs.media): the image size each model takes, clips,
video frames and patches, modalities without a tower, synthetic audio, and the layouts a
processor makes or its recipe stands in for. Each on a real architecture."""

from __future__ import annotations

import pytest
import torch

from harness.build.inputs.recipes import image_processor_name
from tests.harness.build.helpers import (
    built,
    runs,
    trains,
)


def test_an_image_stacked_with_its_prompt_is_half_the_configured_image():
    # SegGPT's image_size is the (prompt, input) pair stacked on the height axis
    model, cfg, inputs = built("seggpt", "SegGptModel")
    h, w = cfg.image_size
    assert inputs.sources["pixel_values"].startswith("processor:")
    assert tuple(inputs.kwargs["pixel_values"].shape[-2:]) == (h // 2, w)
    assert inputs.kwargs["prompt_pixel_values"].shape == inputs.kwargs["pixel_values"].shape
    trains(model, inputs)


def test_frames_are_the_size_the_visual_prompter_pads():
    """TVP pads every frame with a learned prompt around an image of `max_img_size`: the frames
    its processor makes have that size (not the backbone's nominal 64 px), so the prompter
    runs. (Its forward then fails in transformers for any batch > 1: the column
    position embeddings are viewed with the batch size.)"""
    import torch

    model, cfg, inputs = built("tvp", "TvpModel")
    pv = inputs.kwargs["pixel_values"]
    assert inputs.sources["pixel_values"].startswith("processor:")
    assert tuple(pv.shape[-2:]) == (cfg.max_img_size, cfg.max_img_size)
    assert 2 * cfg.visual_prompt_size < cfg.max_img_size
    with torch.no_grad():
        assert model.visual_prompter(pv.clone()).shape == pv.shape


def test_synthetic_audio_features_read_the_audio_sub_config():
    # FunASR-Nano's extractor needs torchaudio; the fallback's width is the audio config's mel
    # bins x its stacked frames (80 x 7), not the top-level default of 80
    model, cfg, inputs = built("fun_asr_nano", "FunAsrNanoForConditionalGeneration")
    assert inputs.sources["input_features"] == "synthetic"
    a = cfg.audio_config
    assert inputs.kwargs["input_features"].shape[-1] == a.num_mel_bins * a.num_stacked_frames
    trains(model, inputs)


def test_a_codec_gets_a_waveform_and_features_of_it_aligned():
    # XCodec2 concatenates semantic features (one frame per acoustic hop) with the acoustic
    # encoder's frames; `quantization_dim` (its fc output, 2 x the hidden size in the default) is
    # set here to the shrunk width
    model, cfg, inputs = built("xcodec2", "Xcodec2Model", quantization_dim=64)
    wave, feats = inputs.kwargs["input_values"], inputs.kwargs["input_features"]
    assert wave.dim() == 3 and wave.shape[1] == 1
    assert wave.shape[-1] == feats.shape[1] * cfg.hop_length
    assert feats.shape[-1] == cfg.semantic_model_config.feature_projection_input_dim
    with torch.no_grad():
        model.eval()(**inputs.kwargs)


def test_clips_through_an_image_processor_are_regrouped_only_for_a_model_taking_clips():
    # X-CLIP's forward unpacks (batch, frames, C, H, W) from its pixels and maps CLIP's image
    # processor, which returns a clip's frames as one flat stack: regrouped per clip
    model, cfg, inputs = built("xclip", "XCLIPModel")
    pv = inputs.kwargs["pixel_values"]
    assert inputs.sources["pixel_values"].startswith("processor:")
    assert pv.dim() == 5 and pv.shape[:2] == (2, cfg.vision_config.num_frames)
    trains(model, inputs)
    # Perceiver's top-level num_frames is its multimodal autoencoder's: its image classifier
    # takes images (the frame count alone does not make it a video)
    model, cfg, inputs = built("perceiver", "PerceiverForImageClassificationLearned")
    assert inputs.kwargs["pixel_values"].dim() == 4
    trains(model, inputs)


def test_video_is_five_dimensional_with_the_configured_frames():
    _, cfg, batch = built("videomae", "VideoMAEForVideoClassification")
    pv = batch.kwargs["pixel_values"]
    assert pv.shape == (2, cfg.num_frames, cfg.num_channels, cfg.image_size, cfg.image_size)


def test_no_inputs_for_a_modality_whose_sub_config_is_null():
    # Gemma-4's default config has vision_config = audio_config = None: no towers are built
    model, cfg, inputs = built("gemma4", "Gemma4ForConditionalGeneration")
    assert cfg.vision_config is None and cfg.audio_config is None
    assert not {"pixel_values", "pixel_values_videos", "input_features"} & set(inputs.kwargs)
    with torch.no_grad():
        model(**inputs.kwargs)


def test_video_patches_have_the_width_of_the_processors_image_patches():
    # HY-V4-VL's tower embeds image and video patches alike (no temporal patch in its config)
    model, cfg, inputs = built("hy_v4_vl", "HYV4VLForConditionalGeneration")
    assert inputs.kwargs["pixel_values_videos"].shape[-1] == inputs.kwargs["pixel_values"].shape[-1]


def test_a_type_mapped_only_to_a_video_processor_gets_videos():
    # InstructBLIP-Video's config names no frame count; transformers maps it a video processor
    # and no image processor, so its pixel_values are (batch, frames, channels, height, width)
    model, cfg, inputs = built("instructblipvideo", "InstructBlipVideoModel")
    assert inputs.kwargs["pixel_values"].dim() == 5
    runs(model, inputs)


def test_colqwen2_patches_are_padded_per_image():
    model, cfg, inputs = built("colqwen2", "ColQwen2ForRetrieval")
    pv, grid = inputs.kwargs["pixel_values"], inputs.kwargs["image_grid_thw"]
    assert pv.dim() == 3 and pv.shape[0] == grid.shape[0] and pv.shape[1] == int(grid.prod(-1).max())
    runs(model, inputs)


@pytest.mark.slow  # MiniCPM-V 4.6 builds in ~25 s under load
def test_a_processor_reporting_per_image_grids_keeps_its_packed_pixels():
    # MiniCPM-V 4.6's processor packs every image's patches into one row and says each image's
    # patch grid in `target_sizes`: its pixels are not the config's image size, and are right
    model, cfg, inputs = built("minicpmv4_6", "MiniCPMV4_6Model")
    assert inputs.sources["pixel_values"].startswith("processor:")
    assert inputs.sources["target_sizes"] == inputs.sources["pixel_values"]
    assert ((inputs.kwargs["input_ids"] == cfg.image_token_id).sum(-1) > 0).all()
    runs(model, inputs)


def test_a_forward_taking_its_processors_own_layout_gets_it():
    # Pix2Struct takes no pixel_values: its image processor's first model input is the
    # flattened patches (row id, column id, pixels) with their mask; the decoder gets ids
    model, cfg, inputs = built("pix2struct", "Pix2StructForConditionalGeneration")
    patches = inputs.kwargs["flattened_patches"]
    assert inputs.sources["flattened_patches"].startswith("processor:Pix2Struct")
    assert patches.shape[-1] == 2 + cfg.vision_config.patch_embed_hidden_size
    assert inputs.kwargs["attention_mask"].shape == patches.shape[:2]
    assert "decoder_input_ids" in inputs.kwargs and inputs.labels == ["labels"]
    runs(model, inputs)


def test_a_vision_tower_takes_the_patch_layout_of_the_processor_feeding_its_composite():
    # Inkling-2's stand-alone vision tower is fed by Inkling2ImageProcessor (torchvision only):
    # one (patch * merge, patch * merge, channels) block per merged token, as the composite gets
    assert image_processor_name("inkling2_vision") == "Inkling2ImageProcessor"
    model, cfg, inputs = built("inkling2_vision", "Inkling2VisionModel")
    pv, grid = inputs.kwargs["pixel_values"], inputs.kwargs["image_grid_thw"]
    side = cfg.patch_size * cfg.spatial_merge_size
    assert tuple(pv.shape[1:]) == (side, side, cfg.num_channels)
    assert pv.shape[0] == int(grid.prod(-1).sum())
    runs(model, inputs)
