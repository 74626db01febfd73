"""Sizes a model needs to agree stay in agreement after shrinking, and the shrunk model runs.

Each test is one class of tie the shrinker used to break (the config built, its forward failed),
checked on a real architecture of the installed transformers: the tie holds in the shrunk config
and a forward on cpu passes.
"""

from __future__ import annotations

import pytest

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import build_model, resolve_config
from harness.build.shrink.budget import fit_budget
from tests.harness.build.shrink_helpers import forward


@pytest.mark.parametrize(
    "model_type, architecture", [("gptj", "GPTJForCausalLM"), ("codegen", "CodeGenModel")]
)
def test_rotary_dim_follows_the_head_size_when_the_config_has_no_head_dim(model_type, architecture):
    """GPT-J/CodeGen rotate `rotary_dim` of each head's features; the head size is hidden / heads
    (no `head_dim` field), and the rotary part shrinks in proportion to it."""
    config = forward(model_type, architecture)
    head = config.n_embd // config.n_head
    assert 2 <= config.rotary_dim <= head and config.rotary_dim % 2 == 0


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


def test_a_stem_width_that_names_a_stage_width_follows_it():
    config = forward("textnet", "TextNetForImageClassification")
    assert config.stem_out_channels == config.hidden_sizes[0]


@pytest.mark.parametrize(
    "model_type, architecture, field",
    [
        ("dpt", "DPTForDepthEstimation", "backbone_out_indices"),
        ("chmv2", "CHMv2ForDepthEstimation", "backbone_config.out_indices"),
    ],
)
def test_a_neck_keeps_as_many_tapped_layers_as_it_has_inputs(model_type, architecture, field):
    """DPT's neck reassembles the outputs of 4 chosen layers: 2 layers cannot feed it. The shrunk
    stack keeps 4 layers and taps each once."""
    config = forward(model_type, architecture)
    level = config
    for part in field.split(".")[:-1]:
        level = getattr(level, part)
    taps = getattr(level, field.split(".")[-1])
    assert len(taps) == 4 and len(set(taps)) == 4
    assert max(taps) <= level.num_hidden_layers


def test_the_budget_halves_chained_widths_together():
    """A width the budget pass halves is halved in every width field that names it, at any level:
    EfficientNet-like in/out channel chains and ZoeDepth's `bottleneck_features` (its fusion width)."""
    config = {
        "in_channels": [32, 96, 192],
        "out_channels": [96, 192, 320],
        "head": {"fusion_hidden_size": 320, "bottleneck_features": 320, "num_labels": 320},
    }

    def count(d):  # the model "builds" only while the chain agrees
        assert d["in_channels"][1:] == d["out_channels"][:-1]
        assert d["head"]["bottleneck_features"] == d["head"]["fusion_hidden_size"]
        return sum(d["out_channels"]) * 1000

    shrunk, params, changed = fit_budget(config, count, 200_000)
    assert changed and params < 200_000
    assert shrunk["in_channels"][1:] == shrunk["out_channels"][:-1]
    assert shrunk["head"]["num_labels"] == 320  # not a width


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("efficientnet", "EfficientNetModel"),
        ("zoedepth", "ZoeDepthForDepthEstimation"),
    ],
)
def test_budgeted_and_rule_shrunk_cnns_run(model_type, architecture):
    forward(model_type, architecture)


def test_the_image_keeps_a_patch_grid_after_the_nets_downsampling():
    """MobileViTV2 downsamples by `output_stride` (32) before it unfolds 2x2 patches: the image
    keeps at least that many patches per side. VitPose's patch size is a [16, 16] list."""
    config = forward("mobilevitv2", "MobileViTV2ForSemanticSegmentation")
    assert config.image_size >= config.output_stride * config.patch_size
    config = forward("vitpose", "VitPoseForPoseEstimation")
    assert min(config.backbone_config.image_size) >= 4 * config.backbone_config.patch_size[0]


@pytest.mark.slow
def test_layers_a_fusion_stage_taps_in_a_sub_models_stack_follow_it():
    """Depth Pro's fusion taps `intermediate_hook_ids` [11, 5] of its 12-layer patch encoder:
    remapped into the shrunk encoder (before: "tuple index out of range"); its image is
    patch_size / min(scaled_images_ratios) on a side (a `by_model_type` input recipe: the
    processor needs torchvision; before: 32 px, "too small to be scaled")."""
    arch = "DepthProForDepthEstimation"
    cfg = resolve_config(ModelSpec("catalog/depth_pro", "depth_pro", arch))
    assert all(0 <= i < cfg.patch_model_config.num_hidden_layers for i in cfg.intermediate_hook_ids)
    assert len(set(cfg.intermediate_hook_ids)) == 2
    pixels = make_inputs(build_model(cfg, arch), cfg, arch).kwargs["pixel_values"]
    assert pixels.shape[-1] * min(cfg.scaled_images_ratios) >= cfg.patch_size


def test_a_projector_keyed_by_patch_count_follows_the_shrunk_patch_grid():
    """Aria's projector picks its query count by the number of patches ({35²: 128, 70²: 256}); the
    shrunk tower gives a 4 x 4 grid, which must be one of its keys (else KeyError in forward)."""
    config = forward("aria", "AriaForConditionalGeneration")
    grid = (config.vision_config.image_size // config.vision_config.patch_size) ** 2
    assert min(config.projector_patch_to_query_dict) == grid
    assert config.max_value_projector_patch_to_query_dict == max(
        config.projector_patch_to_query_dict.values()
    )


def test_a_text_projection_meets_an_unprojected_image_embedding():
    """ALIGN projects only the text, to `projection_dim`, which must equal its EfficientNet's last
    block width (round_filters(320) at the width coefficient); the image embedding is not
    projected, so both shrink together."""
    config = forward("align", "AlignModel")
    assert config.projection_dim == 320 * config.vision_config.width_coefficient


def test_a_swin_audio_tower_projects_its_last_stage_width():
    """CLAP's audio Swin doubles the patch-embedding width per stage and projects `hidden_size`
    features: the embedding width x 2^(stages - 1) must be the shrunk hidden size."""
    config = forward("clap", "ClapModel")
    a = config.audio_config
    assert a.patch_embeds_hidden_size * 2 ** (len(a.depths) - 1) == a.hidden_size


def test_a_vq_codebook_quantizing_the_vision_output_follows_its_width_and_fits_the_vocab():
    # GLM-Image: the VQ-VAE's latent channels are the vision width, its codes and the vision
    # vocab are text ids (the default's 16384-code book in a 1024-token shrunk vocab)
    cfg = resolve_config(ModelSpec("test/glm_image", "glm_image", "GlmImageModel"))
    assert cfg.vq_config.latent_channels == cfg.vision_config.hidden_size
    assert cfg.vq_config.num_embeddings <= cfg.text_config.vocab_size
    assert cfg.text_config.vision_vocab_size <= cfg.text_config.vocab_size


def test_an_adapter_projecting_to_the_text_width_follows_it_and_its_patch_token_fits_the_vocab():
    # Molmo2: the adapter's `text_hidden_size` is the text width (its default 3584 vs 4096), and
    # its image placeholder is `image_patch_id` (aliased `image_token_id`), 151938 unshrunk
    cfg = resolve_config(ModelSpec("test/molmo2", "molmo2", "Molmo2Model"))
    assert cfg.adapter_config.text_hidden_size == cfg.text_config.hidden_size
    assert cfg.image_token_id == cfg.image_patch_id < cfg.text_config.vocab_size


def test_a_scalar_naming_one_backbone_stage_width_follows_that_stage():
    """PP-DocLayout-V3's mask head reads the backbone's stride-4 stage: `x4_feat_dim` (128) is
    the HGNet-V2 backbone's first stage output (128); it follows that stage's shrunk width."""
    config = forward("pp_doclayout_v3", "PPDocLayoutV3Model")
    assert config.x4_feat_dim == config.backbone_config.stage_out_channels[0]


def test_a_group_detr_keeps_at_least_one_query_per_group():
    """RF-DETR's loss splits the queries into `group_detr` groups (13 by default): with the
    shrunk 8 queries and 13 groups each group was empty and the head's own loss raised."""
    config = forward("rf_detr", "RfDetrForObjectDetection")
    assert config.num_queries // config.group_detr >= 1


def test_a_decoder_start_taken_from_the_context_fits_in_the_context():
    """Autoformer's decoder starts from the last `label_length` (10) context steps; the context
    defaulted to the shrunk prediction length (8), shorter than that."""
    config = forward("autoformer", "AutoformerModel")
    assert config.label_length <= config.context_length


def test_per_label_lists_the_default_leaves_unset_get_one_entry_per_label():
    """PP-DocLayout-V2's head indexes `class_thresholds` and `class_order` by class id; the
    default leaves both None (every checkpoint sets them) and its forward raised on None."""
    config = forward("pp_doclayout_v2", "PPDocLayoutV2ForObjectDetection")
    assert len(config.class_thresholds) == len(config.class_order) == config.num_labels
