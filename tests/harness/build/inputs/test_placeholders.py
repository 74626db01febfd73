"""Multimodal prompts (harness.build.inputs.placeholders): as many placeholders as the model has
features, between the modality's boundary tokens, and a modality the model's own check rejects
left out. Each on a real architecture."""

from __future__ import annotations

import pytest
import torch

from harness.build.inputs import make_inputs
from tests.harness.build.helpers import (
    built,
    forward_passes,
    model_of,
    runs,
    trains,
)


def test_qwen2_vl_grid_and_placeholders():
    model, cfg = model_of("qwen2_vl", "Qwen2VLForConditionalGeneration")
    batch = make_inputs(model, cfg, "Qwen2VLForConditionalGeneration", seed=0)
    kw = batch.kwargs
    merge = cfg.vision_config.spatial_merge_size
    t, h, w = kw["image_grid_thw"][0].tolist()
    assert int((kw["input_ids"][0] == cfg.image_token_id).sum()) == t * h * w // merge**2
    out = model(**kw)
    assert torch.isfinite(out.loss)


def test_video_llm_prompt_has_one_placeholder_per_video_feature():
    model, cfg, batch = built("llava_next_video", "LlavaNextVideoForConditionalGeneration")
    kw = batch.kwargs
    feats = model.get_video_features(pixel_values_videos=kw["pixel_values_videos"])
    feats = feats.pooler_output if hasattr(feats, "pooler_output") else feats
    per_sample = (
        sum(
            t.reshape(-1, t.shape[-1]).shape[0]
            for t in (feats if isinstance(feats, (list, tuple)) else [feats])
        )
        // 2
    )
    assert int((kw["input_ids"][0] == cfg.video_token_id).sum()) == per_sample > 0


def test_a_model_without_a_feature_method_says_its_placeholder_count_in_its_own_error():
    # Qwen2-Audio merges audio inside its forward (no get_audio_features): a probe prompt with two
    # placeholders per sample gets "tokens: 4, features: N" back, and the prompt holds N / batch
    model, cfg, inputs = built("qwen2_audio", "Qwen2AudioForConditionalGeneration")
    per_sample = (inputs.kwargs["input_ids"] == cfg.audio_token_id).sum(-1)
    assert (per_sample == per_sample[0]).all() and int(per_sample[0]) > 2
    assert inputs.labels == ["labels"]
    trains(model, inputs)


@pytest.mark.slow  # VibeVoice's shrunk model is over the 5M budget: ~30 s
def test_audio_placeholders_for_a_waveform_model():
    # VibeVoice takes `input_values` (not input_features): its prompt gets audio placeholders
    model, cfg, inputs = built("vibevoice", "VibeVoiceForConditionalGeneration")
    n = int((inputs.kwargs["input_ids"] == cfg.audio_token_id).sum())
    assert n > 0 and "input_values" in inputs.kwargs
    with torch.no_grad():
        model(**inputs.kwargs)


def test_a_modality_the_models_placeholder_check_rejects_is_left_out():
    # GLM-4.1V counts video frames by the image token: images and videos in one prompt never
    # match, so the prompt keeps the images (the model's own get_placeholder_mask says so)
    model, cfg, inputs = built("glm4v", "Glm4vForConditionalGeneration")
    assert "pixel_values" in inputs.kwargs and "pixel_values_videos" not in inputs.kwargs
    assert "video_grid_thw" not in inputs.kwargs and "image_grid_thw" in inputs.kwargs
    assert any(n.startswith("no video input") for n in inputs.notes)
    forward_passes("glm4v", "Glm4vForConditionalGeneration")


def test_a_feature_method_that_needs_the_placeholders_gets_its_own_count():
    # MusicFlamingo's get_audio_features reads the audio placeholders from input_ids; its own
    # mismatch error says how many features it has, and the prompt then holds that many
    model, cfg, inputs = built("musicflamingo", "MusicFlamingoModel")
    n = (inputs.kwargs["input_ids"] == cfg.audio_token_id).sum(-1)
    assert (n > 0).all() and (n == n[0]).all()
    runs(model, inputs)


def test_placeholders_sit_between_the_modalitys_boundary_tokens():
    # Ovis2.5 puts its visual indicator embeddings on the image start/end tokens and counts them
    # (one pair per image): the prompt holds start, the placeholders, end, as its processor writes
    model, cfg, inputs = built("ovis2_5", "Ovis2_5Model")
    ids = inputs.kwargs["input_ids"]
    for start, token, end in [
        (cfg.image_start_token_id, cfg.image_token_id, cfg.image_end_token_id),
        (cfg.video_start_token_id, cfg.video_token_id, cfg.video_end_token_id),
    ]:
        assert ((ids == start).sum(-1) == 1).all() and ((ids == end).sum(-1) == 1).all()
        first, last = (ids[0] == token).nonzero()[[0, -1], 0].tolist()
        assert ids[0, first - 1] == start and ids[0, last + 1] == end
    runs(model, inputs)


def test_a_placeholder_check_that_takes_features_per_image_gets_them():
    # VideoLLaVA's get_placeholder_mask flattens (images, tokens, hidden) features: it raises
    # IndexError on the packed (tokens, hidden) layout, and gets the per-image one
    model, cfg, inputs = built("video_llava", "VideoLlavaModel")
    ids = inputs.kwargs["input_ids"]
    assert ((ids == cfg.image_token_id).sum(-1) > 0).all() and ((ids == cfg.video_token_id).sum(-1) > 0).all()
    runs(model, inputs)


def test_per_item_merge_sizes_go_with_their_modality():
    # VideoLLaMA-3's feature methods require the merge size of each image / video: the image
    # processor's `image_merge_sizes` reach get_image_features, the synthetic videos get theirs
    model, cfg, inputs = built("video_llama_3", "VideoLlama3ForConditionalGeneration")
    kw = inputs.kwargs
    assert inputs.sources["image_merge_sizes"].startswith("processor:")
    assert kw["video_merge_sizes"].shape == (kw["video_grid_thw"].shape[0],)
    for token in (cfg.image_token_id, cfg.video_token_id):
        assert ((kw["input_ids"] == token).sum(-1) > 0).all()
    runs(model, inputs)


def test_video_placeholders_written_with_the_image_token_where_the_processor_does():
    # Nemotron-H Omni's processor writes each video frame's placeholders with the image token and
    # its forward counts video features there; its config's video token id is never read
    model, cfg, inputs = built("nemotron_h_omni", "NemotronH_Omni_Reasoning_V3")
    assert "pixel_values_videos" in inputs.kwargs
    assert ((inputs.kwargs["input_ids"] == cfg.image_token_id).sum(-1) > 0).all()
    runs(model, inputs)


def test_a_prompt_of_vq_codes_gets_one_placeholder_per_code_and_a_target_grid_per_sample():
    # GLM-Image writes its VQ-VAE's codes into the prompt (get_image_tokens over the features):
    # one placeholder per code, not per feature value; its processor follows each sample's
    # source grids with the grid to generate and says how many grids a sample has
    model, cfg, inputs = built("glm_image", "GlmImageModel")
    kw = inputs.kwargs
    assert kw["images_per_sample"].tolist() == [2, 2]
    assert kw["image_grid_thw"].shape[0] == 4
    sources = kw["image_grid_thw"][0::2]
    codes = int(sources.prod(-1).sum()) // model.visual.spatial_merge_size**2
    assert codes < int(sources.prod(-1).sum()) * cfg.vision_config.hidden_size
    assert int((kw["input_ids"] == cfg.image_token_id).sum()) == codes
    runs(model, inputs)
