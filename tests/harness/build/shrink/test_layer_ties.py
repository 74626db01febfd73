"""Layer counts and indices that must agree with the selected layers
(harness.build.shrink.layer_ties), checked on real architectures."""

from __future__ import annotations

import pytest

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import build_model, resolve_config
from tests.harness.build.helpers import (
    forward,
)


def test_negative_taps_into_a_shrunk_vision_tower_stay_inside_it():
    """VipLLaVA concatenates the hidden states of layers -2, -5, -8, -11 and 6 of its 24-layer
    CLIP tower; the tower keeps 2 layers, so each tap must index its 3 hidden states (and the
    projector keeps taking 5 of them)."""
    config = forward("vipllava", "VipLlavaForConditionalGeneration")
    n = config.vision_config.num_hidden_layers
    taps = config.vision_feature_layers
    assert len(taps) == 5
    assert all(-n <= t < n for t in taps)


def test_a_layer_count_of_every_layer_stays_every_layer():
    """Gemma-4's assistant shares the KV of every layer (`num_kv_shared_layers` = the layer count):
    after the layer selection it is the new count (else no level builds)."""
    cfg = resolve_config(
        ModelSpec(
            "catalog/gemma4_unified_assistant",
            "gemma4_unified_assistant",
            "Gemma4UnifiedAssistantForCausalLM",
        )
    )
    t = cfg.text_config
    assert t.num_kv_shared_layers == t.num_hidden_layers


def test_a_looped_stack_shrinks_its_per_stack_layers_and_keeps_the_invocation_multiple():
    """HRM runs `num_layers_per_stack` layers H x (L + 1) times; its `num_hidden_layers` is that
    product (128 = 16 x 2 x 4). The per-stack count is the level's layer count (not 16 layers per
    stack) and the product follows it."""
    cfg = forward("hrm_text", "HrmTextModel")
    assert cfg.num_layers_per_stack == 2
    assert cfg.num_hidden_layers == cfg.num_layers_per_stack * cfg.H_cycles * (cfg.L_cycles + 1)


@pytest.mark.slow
def test_layers_a_fusion_stage_taps_in_a_sub_models_stack_follow_it():
    """Depth Pro's fusion taps `intermediate_hook_ids` [11, 5] of its 12-layer patch encoder:
    remapped into the shrunk encoder (else "tuple index out of range"); its image is
    patch_size / min(scaled_images_ratios) on a side (a `by_model_type` input recipe: the
    processor needs torchvision; 32 px is "too small to be scaled")."""
    arch = "DepthProForDepthEstimation"
    cfg = resolve_config(ModelSpec("catalog/depth_pro", "depth_pro", arch))
    assert all(0 <= i < cfg.patch_model_config.num_hidden_layers for i in cfg.intermediate_hook_ids)
    assert len(set(cfg.intermediate_hook_ids)) == 2
    pixels = make_inputs(build_model(cfg, arch), cfg, arch).kwargs["pixel_values"]
    assert pixels.shape[-1] * min(cfg.scaled_images_ratios) >= cfg.patch_size
