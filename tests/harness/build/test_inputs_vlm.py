"""Vision-language inputs that must fit the shrunk config (issue 10, third round), each on a real
architecture: the processor's patch layout follows the model's patch embedding, placeholder and
boundary tokens lie in the shrunk vocab and are as many as the model asks for."""

from __future__ import annotations

from contracts.records import ModelSpec
from harness.build.models import resolve_config
from tests.harness.build.shrink_helpers import built, runs


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


def test_a_dsa_indexer_keeps_its_top_k_a_multiple_of_its_key_pool():
    # GLM-5-Next validates index_topk % index_kpool == 0: with the pool unshrunk (16) the full
    # level failed, the core level kept the vision merger wider than the text (96 vs 32)
    cfg = resolve_config(ModelSpec("test/glm5_next", "glm5_next", "Glm5NextModel"))
    text = cfg.text_config
    assert cfg._shrink_level == "full"
    assert text.index_topk % text.index_kpool == 0
    assert cfg.vision_config.out_hidden_size == text.hidden_size


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


def test_token_ids_follow_a_vocab_the_budget_pass_cut():
    # Florence-2's text vocab is cut 1024 -> 256 by the parameter budget: its image token id,
    # remapped to the top of the 1024-token vocab, must move inside the cut one
    model, cfg, inputs = built("florence2", "Florence2ForConditionalGeneration")
    assert "text_config.vocab_size" in cfg._shrink_budget_changes
    assert 0 <= cfg.image_token_id < cfg.text_config.vocab_size
    assert int(inputs.kwargs["input_ids"].max()) < cfg.text_config.vocab_size
    runs(model, inputs)


def test_a_token_id_the_modeling_code_hard_codes_is_moved_into_the_vocab():
    # ShieldGemma-2 scores the logits of its yes/no tokens, read with getattr defaults
    # (10784, 3771) its config does not hold
    model, cfg, inputs = built("shieldgemma2", "ShieldGemma2ForImageClassification")
    vocab = cfg.text_config.vocab_size
    assert 0 <= model.yes_token_index < vocab and 0 <= model.no_token_index < vocab
    runs(model, inputs)


def test_a_placeholder_check_that_takes_features_per_image_gets_them():
    # VideoLLaVA's get_placeholder_mask flattens (images, tokens, hidden) features: the packed
    # (tokens, hidden) layout made it raise IndexError and the inputs were never made
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


def test_a_pooled_patch_layout_only_its_torchvision_processor_makes_comes_from_its_recipe():
    # Molmo2's image processor (torchvision) cuts images into flattened patches and says which
    # patches each token pools (`image_token_pooling`) and each image's token grid (`image_grids`)
    model, cfg, inputs = built("molmo2", "Molmo2Model")
    kw = inputs.kwargs
    vision = cfg.vision_config
    assert inputs.sources["image_token_pooling"].startswith("recipe:")
    assert kw["pixel_values"].shape[-1] == vision.patch_size**2 * vision.num_channels
    assert int(kw["image_token_pooling"].max()) < kw["pixel_values"].shape[1]
    tokens = int((kw["image_grids"][:, 0] * kw["image_grids"][:, 1]).sum())
    assert tokens == kw["image_token_pooling"].shape[0] == int((kw["input_ids"] == cfg.image_token_id).sum())
    runs(model, inputs)
