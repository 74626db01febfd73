"""Fields the config class owns (harness.build.shrink.class_fields): a flat Hub config nested into
its text config, and fields the class derives recomputed from the shrunk sizes."""

from __future__ import annotations

from tests.harness.build.helpers import (
    forward,
)


def test_a_flat_hub_config_of_a_composite_type_fills_its_text_config():
    """Step-3.7-Flash's Hub config is flat (remote-code format): layers, heads and `sliding_window`
    at the top level, which the composite class ignores; they move into `text_config`."""
    layer_types = (["full_attention"] + ["sliding_attention"] * 3) * 4
    config = {
        "num_hidden_layers": 16,
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128896,
        "intermediate_size": 11264,
        "sliding_window": 512,
        "layer_types": layer_types,
    }
    cfg = forward("step3p7", "Step3p7Model", config)
    t = cfg.text_config
    assert t.sliding_window is not None and t.sliding_window < 16
    assert "sliding_attention" in t.layer_types and t.num_attention_heads // t.num_key_value_heads == 8


def test_fields_the_config_class_derives_are_recomputed_from_the_shrunk_sizes():
    """Zamba computes `attention_hidden_size` = 2 x hidden when it is None; MarianMT's
    `decoder_vocab_size` is the vocab size. Left at their unshrunk values they no longer agree
    with the shrunk model (a 7424-wide attention on a 32-wide model; logits reshaped to the old
    vocab): the class recomputes them."""
    zamba = forward("zamba", "ZambaModel")
    assert zamba.attention_hidden_size == 2 * zamba.hidden_size
    marian = forward("marian", "MarianMTModel")
    assert marian.decoder_vocab_size == marian.vocab_size


def test_attributes_the_config_class_computes_in_post_init_are_recomputed():
    """Zamba2's `mamba_headdim` (= expand x hidden / mamba heads) is no field: `__post_init__`
    computes it, and a value passed in overrides it. Left at 640 the shrunk Mamba layer reshaped
    a 64-wide state into 8 heads of 640 ("shape '[2, 16, 8, 640]' is invalid"); dropped, the
    class computes it from the shrunk sizes."""
    cfg = forward("zamba2", "Zamba2ForCausalLM")
    assert cfg.mamba_headdim == cfg.mamba_expand * cfg.hidden_size // cfg.n_mamba_heads
    assert cfg.attention_hidden_size == 2 * cfg.hidden_size


def test_computed_fields_of_a_tower_in_an_auto_config_slot_are_recomputed():
    """VisionTextDualEncoder (clip-italian) takes any vision and text tower (`AutoConfig` slots):
    the ViT tower's `pooler_output_size` (None -> its hidden size) is found through the tower's
    own model_type and recomputed (a 768-wide pooler on a 32-wide tower fails the projection's
    matmul)."""
    cfg = forward("vision-text-dual-encoder", "VisionTextDualEncoderModel")
    assert cfg.vision_config.pooler_output_size == cfg.vision_config.hidden_size


def test_a_per_layer_list_the_config_class_derives_is_recomputed_from_the_shrunk_heads():
    """Sapiens2 derives `num_key_value_heads_per_layer` (16 for its full-attention layers, 8 for
    the GQA ones) from its head counts: resampled with the layers it kept 16 and 8 for a level of
    2 query heads; recomputed, every entry divides the shrunk heads, and the q:kv ratio of its
    GQA layers (`num_key_value_attention_heads`) is kept."""
    cfg = forward("sapiens2", "Sapiens2Model")
    assert cfg.num_attention_heads // cfg.num_key_value_attention_heads == 2
    assert len(cfg.num_key_value_heads_per_layer) == cfg.num_hidden_layers
    assert all(cfg.num_attention_heads % h == 0 for h in cfg.num_key_value_heads_per_layer)


def test_lists_the_config_class_derives_follow_the_fields_the_budget_pass_halves():
    """EfficientLoFTR derives its per-block channel lists from `out_features` (no fields): passed
    back in from the unhalved config they overrode what the class computes from the halved
    widths, and the forward's reshape failed."""
    config = forward("efficientloftr", "EfficientLoFTRModel")
    assert "out_features" in " ".join(config._shrink_budget_changes)
    assert [blocks[0] for blocks in config.stage_block_out_channels] == config.out_features
    assert config.hidden_size == config.out_features[-1]
