"""Layer selection (harness.build.shrink.layers): the fewest layers that keep a config's pattern,
per-layer lists and index lists resampled with them, and parts rescaled keeping their ties."""

from __future__ import annotations

import pytest

from harness.build.rules import shrink_rules
from harness.build.shrink.layers import rescale_parts, rescale_parts_keeping_ties, select_layers
from tests.harness.build.helpers import (
    SEQ,
    forward,
    shrunk,
)


def test_layer_selection_prefix_period_and_index_lists():
    r = shrink_rules()
    d = {"layer_types": ["a", "a", "b"] * 4, "mlp_only_layers": [0, 1], "first_k_dense_replace": 2}
    plan = select_layers(d, 12, r, 2)
    kinds = plan.updates["layer_types"]
    assert set(kinds) == {"a", "b"} and plan.updates["first_k_dense_replace"] == 1
    assert plan.updates["mlp_only_layers"] == [0]
    # an irregular pattern keeps the first layer of each kind, in order
    plan = select_layers({"hybrid_override_pattern": "MM*M-MMM*"}, 9, r, 2)
    assert plan.updates["hybrid_override_pattern"] == "M*-"


def test_sliding_window_patterns():
    g2 = shrunk("gemma2")
    assert g2.layer_types == ["sliding_attention", "full_attention"]
    assert g2.sliding_window < SEQ
    g3 = shrunk("gemma3_text")
    assert g3.layer_types.count("sliding_attention") == 5 and g3.layer_types[-1] == "full_attention"
    assert len(g3.layer_types) == g3.num_hidden_layers == 6
    assert set(g3.rope_parameters) == {"sliding_attention", "full_attention"}  # per-type rope kept


def test_hybrid_ssm_jamba_keeps_periods():
    from transformers import AutoConfig

    default = AutoConfig.for_model("jamba")
    cfg = shrunk("jamba")
    assert (cfg.attn_layer_period, cfg.attn_layer_offset) == (
        default.attn_layer_period,
        default.attn_layer_offset,
    )
    assert cfg.num_hidden_layers == default.attn_layer_period  # one full period: 1 attention, 7 mamba
    kinds = cfg.layers_block_type
    assert kinds.count("attention") == 1 and kinds.count("mamba") == cfg.num_hidden_layers - 1
    assert (
        sum(cfg.layers_num_experts[i] > 1 for i in range(cfg.num_hidden_layers)) == cfg.num_hidden_layers // 2
    )


@pytest.mark.parametrize("model_type", ["bamba", "falcon_h1", "nemotron_h", "qwen3_next"])
def test_hybrid_models_keep_every_layer_kind(model_type):
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    cfg = shrunk(model_type)
    for field in ("layer_types", "layers_block_type"):
        if isinstance(getattr(default, field, None), list):
            assert set(getattr(cfg, field)) == set(getattr(default, field))
            assert len(getattr(cfg, field)) <= len(getattr(default, field))


def test_nemotron_h_hybrid_pattern_string_from_a_hub_config():
    pattern = "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-"
    from transformers import NemotronHConfig

    original = NemotronHConfig(hybrid_override_pattern=pattern, num_hidden_layers=len(pattern))
    cfg = shrunk("nemotron_h", hybrid_override_pattern=pattern, num_hidden_layers=len(pattern))
    assert len(set(original.layers_block_type)) == 3
    assert set(cfg.layers_block_type) == set(original.layers_block_type)
    assert cfg.num_hidden_layers == len(cfg.layers_block_type) < len(pattern)


def test_an_index_list_naming_every_layer_does_not_pin_every_layer():
    """LFM2's default `full_attn_idxs` is 0..31, as long as the stack: read as per-layer values it
    would give each layer a kind of its own and keep all 32 layers (3.9M parameters at `full`)."""
    config = forward("lfm2", "Lfm2ForCausalLM")
    assert config.num_hidden_layers == 2
    assert config.full_attn_idxs == [0, 1] and len(config.layer_types) == 2


def test_a_per_layer_list_of_source_layers_keeps_each_readers_source():
    """Kolibri-1.1's `kv_source_layers` names, per layer, the earlier layer whose K/V it reads (its
    own index when it computes them): read as plain values every layer differed (no level built);
    a layer's kind is own / read by others / reads another, a kept reader keeps its source, and
    the entries are remapped into the kept layers (its config validates exactly that)."""
    config = forward("kolibri1_1", "Kolibri1_1ForCausalLM")
    src = config.kv_source_layers
    assert config.num_hidden_layers < 50 and len(src) == config.num_hidden_layers
    assert any(s != i for i, s in enumerate(src))  # a reader is kept
    assert all(src[s] == s and config.layer_types[s] == config.layer_types[i] for i, s in enumerate(src))


def test_equal_parts_stay_equal_when_a_split_allows_it():
    assert rescale_parts([22, 22, 20], 4) == [2, 1, 1]  # plain largest remainder breaks the tie
    assert rescale_parts_keeping_ties([22, 22, 20], 4) == [1, 1, 2]
    assert rescale_parts_keeping_ties([16, 24, 24], 8) == [2, 3, 3]
    assert sum(rescale_parts_keeping_ties([11, 11, 10], 4)) == 4
    # no split keeps the tie: the proportional one
    assert rescale_parts_keeping_ties([22, 22], 3) == rescale_parts([22, 22], 3)
