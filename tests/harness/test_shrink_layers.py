"""Layer selection and layer indices after shrinking, on real architectures.

Each test is one class of layer bookkeeping the shrinker got wrong: the config built, but kept
every layer or pointed past the shrunk stack; the shrunk config is checked and a forward on cpu
passes.
"""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.inputs import make_inputs
from harness.models import build_model, resolve_config


def forward(model_type: str, architecture: str):
    config = resolve_config(ModelSpec(f"catalog/{model_type}/{architecture}", model_type, architecture))
    model = build_model(config, architecture)
    with torch.no_grad():
        model(**make_inputs(model, config, architecture).kwargs)
    return config


def test_an_index_list_naming_every_layer_does_not_pin_every_layer():
    """LFM2's default `full_attn_idxs` is 0..31, as long as the stack: read as per-layer values it
    gave each layer a kind of its own and all 32 layers were kept (3.9M parameters at `full`)."""
    config = forward("lfm2", "Lfm2ForCausalLM")
    assert config.num_hidden_layers == 2
    assert config.full_attn_idxs == [0, 1] and len(config.layer_types) == 2


def test_negative_taps_into_a_shrunk_vision_tower_stay_inside_it():
    """VipLLaVA concatenates the hidden states of layers -2, -5, -8, -11 and 6 of its 24-layer
    CLIP tower; the tower keeps 2 layers, so each tap must index its 3 hidden states (and the
    projector keeps taking 5 of them)."""
    config = forward("vipllava", "VipLlavaForConditionalGeneration")
    n = config.vision_config.num_hidden_layers
    taps = config.vision_feature_layers
    assert len(taps) == 5
    assert all(-n <= t < n for t in taps)
