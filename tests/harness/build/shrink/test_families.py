"""Architecture families (harness.build.shrink.families): experts, MLA, state-space layers, vision,
audio and staged CNN sizes, windows and context lengths. Each on a real architecture."""

from __future__ import annotations

import pytest
import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import build_model, resolve_config
from harness.build.rules import shrink_rules
from tests.harness.build.helpers import (
    BUDGET,
    SEQ,
    forward,
    shrunk,
)


@pytest.mark.parametrize(
    "model_type,experts_field,top_k_field",
    [
        ("mixtral", "num_local_experts", "num_experts_per_tok"),
        ("qwen3_moe", "num_experts", "num_experts_per_tok"),
    ],
)
def test_moe_keeps_experts_per_token_with_fewer_experts(model_type, experts_field, top_k_field):
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    cfg = shrunk(model_type)
    assert getattr(cfg, top_k_field) == getattr(default, top_k_field)
    assert getattr(default, top_k_field) < getattr(cfg, experts_field) < getattr(default, experts_field) or (
        getattr(cfg, experts_field) == getattr(default, experts_field) <= 8
    )


def test_mla_deepseek_v3_first_k_dense_and_grouped_routing():
    cfg = shrunk("deepseek_v3", "DeepseekV3ForCausalLM")
    assert cfg.num_hidden_layers == 2 and cfg.first_k_dense_replace == 1  # one dense, one MoE layer
    assert cfg.kv_lora_rank < 512 and cfg.q_lora_rank < 1536
    assert cfg.head_dim == cfg.qk_rope_head_dim  # a rule the model enforces
    assert cfg.qk_head_dim == cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    assert cfg.num_experts_per_tok == 8
    assert cfg.n_routed_experts % cfg.n_group == 0
    per_group = cfg.n_routed_experts // cfg.n_group
    assert per_group >= 2 and cfg.topk_group * per_group >= cfg.num_experts_per_tok


def test_a_dsa_indexer_keeps_its_top_k_a_multiple_of_its_key_pool():
    # GLM-5-Next validates index_topk % index_kpool == 0: with the pool unshrunk (16) the full
    # level failed, the core level kept the vision merger wider than the text (96 vs 32)
    cfg = resolve_config(ModelSpec("test/glm5_next", "glm5_next", "Glm5NextModel"))
    text = cfg.text_config
    assert cfg._shrink_level == "full"
    assert text.index_topk % text.index_kpool == 0
    assert cfg.vision_config.out_hidden_size == text.hidden_size


def test_a_partial_rope_keeps_its_share_of_the_shrunk_head():
    """DeepSeek-V4 rotates `partial_rotary_factor` (1/8) of each 512-wide head (rope 64, nope 448):
    the fixed MLA rope size would be the whole tiny head (nope 0, the forward failed)."""
    config = {
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 1,
        "hidden_size": 4096,
        "num_hidden_layers": 4,
        "q_lora_rank": 1024,
        "o_lora_rank": 1024,
        "rope_theta": 10000,
        "sliding_window": 128,
        "index_head_dim": 128,
        "index_n_heads": 64,
        "index_topk": 512,
        "vocab_size": 129280,
    }
    cfg = forward("deepseek_v4", "DeepseekV4ForCausalLM", config)
    assert 2 <= cfg.qk_rope_head_dim < cfg.head_dim


def test_a_pure_ssm_names_its_heads_like_attention_and_shrinks_fully():
    """Mamba-2 validates num_heads x head_dim == expand x hidden: its heads are the SSM's, not
    attention heads of 16 (which failed validation at every width level: 215M parameters)."""
    config = forward("mamba2", "Mamba2ForCausalLM")
    assert config._shrink_level == "full" and config._shrink_parameters < BUDGET
    assert config.num_heads * config.head_dim == config.expand * config.hidden_size
    assert config.num_heads % config.n_groups == 0


def test_vision_image_size_multiple_of_patch():
    cfg = shrunk("vit")
    assert cfg.image_size % cfg.patch_size == 0 and cfg.image_size < 224


def test_audio_whisper_and_wav2vec2():
    w = shrunk("whisper")
    assert w.max_source_positions <= 32 and w.num_mel_bins == 80
    v = shrunk("wav2vec2")
    assert (
        len(v.conv_dim) == len(v.conv_stride) == len(v.conv_kernel) == 7
    )  # the feature extractor keeps its depth
    assert max(v.conv_dim) <= 32 and v.num_conv_pos_embeddings <= SEQ


def test_chained_stage_width_lists_scale_together_and_detector_channel_lists_follow():
    """HGNetV2 (the D-FINE/DEIMv2 backbone) chains its per-stage lists: the stem's output is the
    first stage's input, each stage's output the next one's input. One factor for every list keeps
    the chain; the detector's encoder inputs follow the backbone's stage outputs and its decoder
    inputs the encoder's width. D-FINE then runs forward."""

    config = resolve_config(ModelSpec("catalog/d_fine/DFineModel", "d_fine", "DFineModel"))
    b = config.backbone_config
    assert b.stage_in_channels[0] == b.stem_channels[-1]
    assert b.stage_in_channels[1:] == b.stage_out_channels[:-1]
    assert b.stage_in_channels[0] <= shrink_rules().stage_width_first < b.stage_out_channels[-1]
    outs = dict(zip(b.stage_names[1:], b.stage_out_channels))
    assert config.encoder_in_channels == [outs[s] for s in b.out_features]
    assert config.decoder_in_channels == [config.encoder_hidden_dim] * len(config.decoder_in_channels)
    model = build_model(config, "DFineModel")
    with torch.no_grad():
        out = model(**make_inputs(model, config, "DFineModel").kwargs)
    assert out.last_hidden_state.shape[-1] == config.d_model


def test_staged_backbone_hidden_size_top_down_lists_and_one_image_size():
    """EdgeTAM (a SAM 2 Hiera backbone): the backbone's hidden size is its first stage's width; the
    FPN's top-down channel list names the same stage widths (largest first); the backbone, the
    prompt encoder and the outer config see one image size; the FPN feature sizes scale with it."""
    config = forward("edgetam_video", "EdgeTamModel")
    v = config.vision_config
    b = v.backbone_config
    assert b.hidden_size == b.embed_dim_per_stage[0]
    assert v.backbone_channel_list == list(reversed(b.embed_dim_per_stage))
    sizes = {config.image_size, config.prompt_encoder_config.image_size, tuple(b.image_size)[0]}
    assert len(sizes) == 1
    assert v.backbone_feature_sizes[-1][0] * config.prompt_encoder_config.patch_size == sizes.pop()


def test_per_block_lists_follow_the_stage_depths_and_widths():
    """PP-LCNetV4 spells out one config per block (`block_configs`, their lengths are the depths):
    shrinking the depths keeps each stage's first blocks, and their channel entries follow the
    scaled stage widths."""
    config = forward("pp_ocrv6_tiny_rec", "PPOCRV6TinyRecForTextRecognition")
    b = config.backbone_config
    assert [len(stage) for stage in b.block_configs] == list(b.depths)
    assert [stage[-1][2] for stage in b.block_configs] == list(b.stage_out_channels)


def test_the_image_keeps_a_patch_grid_after_the_nets_downsampling():
    """MobileViTV2 downsamples by `output_stride` (32) before it unfolds 2x2 patches: the image
    keeps at least that many patches per side. VitPose's patch size is a [16, 16] list."""
    config = forward("mobilevitv2", "MobileViTV2ForSemanticSegmentation")
    assert config.image_size >= config.output_stride * config.patch_size
    config = forward("vitpose", "VitPoseForPoseEstimation")
    assert min(config.backbone_config.image_size) >= 4 * config.backbone_config.patch_size[0]


def test_a_projector_keyed_by_patch_count_follows_the_shrunk_patch_grid():
    """Aria's projector picks its query count by the number of patches ({35²: 128, 70²: 256}); the
    shrunk tower gives a 4 x 4 grid, which must be one of its keys (else KeyError in forward)."""
    config = forward("aria", "AriaForConditionalGeneration")
    grid = (config.vision_config.image_size // config.vision_config.patch_size) ** 2
    assert min(config.projector_patch_to_query_dict) == grid
    assert config.max_value_projector_patch_to_query_dict == max(
        config.projector_patch_to_query_dict.values()
    )


def test_image_tokens_fit_the_shrunk_patch_grid():
    cfg = resolve_config(ModelSpec("test/gemma3", "gemma3", "Gemma3Model"))
    patches = (cfg.vision_config.image_size // cfg.vision_config.patch_size) ** 2
    assert cfg.mm_tokens_per_image <= patches


def test_a_compound_scaled_net_keeps_few_blocks_per_stage():
    """EfficientNet repeats ceil(depth_coefficient x repeats) blocks per stage (B7's 3.1: 55 blocks);
    the coefficient is capped at 1 and each stage's repeats at the stage depth cap."""
    cfg = forward("efficientnet", "EfficientNetModel")
    assert cfg.depth_coefficient <= 1.0
    assert max(cfg.num_block_repeats) <= shrink_rules().stage_depth_max


def test_a_group_detr_keeps_at_least_one_query_per_group():
    """RF-DETR's loss splits the queries into `group_detr` groups (13 by default): with the
    shrunk 8 queries and 13 groups each group would be empty and the head's own loss raises."""
    config = forward("rf_detr", "RfDetrForObjectDetection")
    assert config.num_queries // config.group_detr >= 1


def test_a_time_series_context_is_a_few_patches_long():
    """TimesFM-2.5 reads a 16,384-step context as 512 patches in a Python loop Dynamo unrolls (a
    28,000-node graph); a few patches test the same code."""
    config = forward("timesfm2_5", "TimesFm2_5ModelForPrediction")
    assert config.context_length == shrink_rules().context_patches * config.patch_length
