"""Vision-language inputs that must fit the shrunk config (issue 10, third round), each on a real
architecture: the processor's patch layout follows the model's patch embedding, placeholder and
boundary tokens lie in the shrunk vocab and are as many as the model asks for."""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.inputs import make_inputs
from harness.models import build_model, resolve_config


def built(model_type: str, architecture: str):
    cfg = resolve_config(ModelSpec(f"test/{model_type}", model_type, architecture))
    model = build_model(cfg, architecture, seed=0)
    return model, cfg, make_inputs(model, cfg, architecture, seed=0)


def runs(model, inputs) -> None:
    with torch.no_grad():
        model(**inputs.kwargs)


def test_a_vision_config_without_a_temporal_patch_gets_single_frame_patches():
    # LLaVA-OneVision-1.5's vision tower embeds each patch with a Conv2d (its config names no
    # temporal_patch_size); the Qwen2-VL processor it is mapped to stacks 2 frames by default
    model, cfg, inputs = built("llava_onevision1_5_vision", "LlavaOnevision15VisionModel")
    assert inputs.sources["pixel_values"].startswith("processor:")
    assert inputs.kwargs["pixel_values"].shape[-1] == cfg.in_channels * cfg.patch_size ** 2
    runs(model, inputs)


def test_a_vision_config_with_a_temporal_patch_keeps_it():
    model, cfg, inputs = built("qwen2_vl", "Qwen2VLModel")
    vision = cfg.vision_config
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    assert vision.temporal_patch_size == 2 and inputs.kwargs["pixel_values"].shape[-1] == width


def test_a_dsa_indexer_keeps_its_top_k_a_multiple_of_its_key_pool():
    # GLM-5-Next validates index_topk % index_kpool == 0: with the pool unshrunk (16) the full
    # level failed, the core level kept the vision merger wider than the text (96 vs 32)
    cfg = resolve_config(ModelSpec("test/glm5_next", "glm5_next", "Glm5NextModel"))
    text = cfg.text_config
    assert cfg._shrink_level == "full"
    assert text.index_topk % text.index_kpool == 0
    assert cfg.vision_config.out_hidden_size == text.hidden_size
