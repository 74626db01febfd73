"""Widths derived from another width times a factor keep that relation after shrinking.

Each test is one class of derived width, on a real architecture of the installed transformers:
the relation holds in the shrunk config and a forward on cpu passes (before: the config built,
the forward failed at the projector's first matmul).
"""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import build_model, resolve_config
from harness.build.shrink import rules
from harness.build.shrink.derived import keep_derived_widths


def forward(model_type: str, architecture: str, config: dict | None = None):
    spec = ModelSpec(f"catalog/{model_type}/{architecture}", model_type, architecture, config or {})
    cfg = resolve_config(spec)
    model = build_model(cfg, architecture)
    with torch.no_grad():
        model(**make_inputs(model, cfg, architecture).kwargs)
    return cfg


def test_a_merger_input_is_the_vision_width_times_the_merge_size_squared():
    """MuseGlimmer's projector takes `out_hidden_size` = vision hidden x merge_size^2 (6144 =
    1536 x 2^2): the shrunk vision width times the same factor."""
    cfg = forward("muse_glimmer", "MuseGlimmerModel")
    v = cfg.vision_config
    assert cfg.out_hidden_size == v.hidden_size * v.merge_size**2


def test_a_concatenation_of_tapped_layers_is_the_width_times_their_count():
    """Mllama concatenates the last hidden state with the `intermediate_layers_indices` ones:
    `vision_output_dim` = hidden x (taps + 1) (7680 = 1280 x 6), with the shrunk taps."""
    cfg = forward("mllama", "MllamaModel")
    v = cfg.vision_config
    assert v.vision_output_dim == v.hidden_size * (len(v.intermediate_layers_indices) + 1)


def test_a_type_formula_gives_the_relation_its_default_lacks():
    """Llama-4's pixel-shuffle MLP takes hidden / pixel_shuffle_ratio^2 features into a linear of
    `intermediate_size` inputs: real checkpoints hold it (1408 -> 5632), the type's default does
    not (768 vs 5632), so a formula in the shrink rules gives it; the budget pass halves the
    equal projector widths of that level together."""
    cfg = forward("llama4", "Llama4VisionModel")
    v = cfg.vision_config if hasattr(cfg, "vision_config") else cfg
    assert v.intermediate_size == round(v.hidden_size / v.pixel_shuffle_ratio**2)
    assert v.projector_input_dim == v.projector_output_dim == v.vision_output_dim


def test_a_type_formula_names_a_sub_configs_width():
    """NeuCodec quantizes its acoustic and semantic features concatenated: `quantization_dim` is
    the sum of its width and its semantic tower's (2048 = 1024 + 1024), which stayed 2048 while
    both towers shrank (the forward failed at the quantizer's first matmul)."""
    cfg = forward("neucodec", "NeuCodecModel")
    assert cfg.quantization_dim == cfg.hidden_size + cfg.semantic_model_config.hidden_size < 2048


def test_only_relations_of_the_unshrunk_config_are_kept():
    """A width that is no product of a shrunk width and a factor stays; a field another rule
    shrank is that rule's."""
    original = {
        "hidden_size": 1024,
        "merge_size": 2,
        "out_hidden_size": 4096,
        "proj_size": 3000,
        "intermediate_size": 4096,
    }
    shrunk = dict(original, hidden_size=32, intermediate_size=64)
    changed = keep_derived_widths(original, shrunk, rules())
    assert changed == ["out_hidden_size"]
    assert (
        shrunk["out_hidden_size"] == 128 and shrunk["proj_size"] == 3000 and shrunk["intermediate_size"] == 64
    )


# --------------------------------------------------------------------------- per-layer and Hub-shaped configs
def test_per_layer_overrides_are_shrunk_as_their_level():
    """Dots3's sliding layers override heads and the nope part (`per_layer_config`): each override
    is shrunk as the level with its fields applied, so the config's own check (sliding head size =
    nope + rope) holds and the strongest level builds (before: only `layers`, 3.9B parameters, a
    180 s load timeout)."""
    cfg = forward("dots3_note", "Dots3NoteForCausalLM")
    assert cfg._shrink_level == "full"
    t = cfg.text_config
    swa = t.per_layer_config["sliding_attention"]
    assert swa.head_dim == swa.qk_nope_head_dim + swa.qk_rope_head_dim
    assert swa.num_attention_heads <= t.num_attention_heads


def test_a_layer_count_of_every_layer_stays_every_layer():
    """Gemma-4's assistant shares the KV of every layer (`num_kv_shared_layers` = the layer count):
    after the layer selection it is the new count (before: no level built)."""
    cfg = resolve_config(
        ModelSpec(
            "catalog/gemma4_unified_assistant",
            "gemma4_unified_assistant",
            "Gemma4UnifiedAssistantForCausalLM",
        )
    )
    t = cfg.text_config
    assert t.num_kv_shared_layers == t.num_hidden_layers


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


def test_groups_tails_global_widths_and_unit_grids_follow_the_shrunk_sizes():
    """Mimi's depthwise upsampling has one group per channel (`upsample_groups` = hidden); BLT's
    local encoder reads the global transformer's width (`hidden_size_global`); EoMT's last
    `num_blocks` layers see the queries (at least one, after one plain layer); Hiera's token grid
    (image / patch_stride) is a whole number of masked units."""

    def cfg(model_type):
        return resolve_config(ModelSpec(f"catalog/{model_type}", model_type, ""))

    mimi = cfg("mimi")
    assert mimi.upsample_groups == mimi.hidden_size
    blt = cfg("blt")
    assert blt.encoder_config.hidden_size_global == blt.global_config.hidden_size
    eomt = cfg("eomt")
    assert 1 <= eomt.num_blocks < eomt.num_hidden_layers
    hiera = cfg("hiera")
    tokens = hiera.image_size[0] // hiera.patch_stride[0]
    assert (
        tokens % hiera.masked_unit_size[0] == 0
        and tokens % hiera.query_stride[0] ** hiera.num_query_pool == 0
    )


def test_attributes_the_config_class_computes_in_post_init_are_recomputed():
    """Zamba2's `mamba_headdim` (= expand x hidden / mamba heads) is no field: `__post_init__`
    computes it, and a value passed in overrides it. Left at 640 the shrunk Mamba layer reshaped
    a 64-wide state into 8 heads of 640 ("shape '[2, 16, 8, 640]' is invalid"); dropped, the
    class computes it from the shrunk sizes."""
    cfg = forward("zamba2", "Zamba2ForCausalLM")
    assert cfg.mamba_headdim == cfg.mamba_expand * cfg.hidden_size // cfg.n_mamba_heads
    assert cfg.attention_hidden_size == 2 * cfg.hidden_size


def test_a_looped_stack_shrinks_its_per_stack_layers_and_keeps_the_invocation_multiple():
    """HRM runs `num_layers_per_stack` layers H x (L + 1) times; its `num_hidden_layers` is that
    product (128 = 16 x 2 x 4). The per-stack count is the level's layer count (before: 16 layers
    per stack were kept, a 60 s forward and load timeouts) and the product follows it."""
    cfg = forward("hrm_text", "HrmTextModel")
    assert cfg.num_layers_per_stack == 2
    assert cfg.num_hidden_layers == cfg.num_layers_per_stack * cfg.H_cycles * (cfg.L_cycles + 1)


def test_a_compound_scaled_net_keeps_few_blocks_per_stage():
    """EfficientNet repeats ceil(depth_coefficient x repeats) blocks per stage (B7's 3.1: 55 blocks);
    the coefficient is capped at 1 and each stage's repeats at the stage depth cap."""
    from harness.build.shrink import rules

    cfg = forward("efficientnet", "EfficientNetModel")
    assert cfg.depth_coefficient <= 1.0
    assert max(cfg.num_block_repeats) <= rules()["stage_depth_max"]


def test_computed_fields_of_a_tower_in_an_auto_config_slot_are_recomputed():
    """VisionTextDualEncoder (clip-italian) takes any vision and text tower (`AutoConfig` slots):
    the ViT tower's `pooler_output_size` (None -> its hidden size) is found through the tower's
    own model_type and recomputed (before: a 768-wide pooler on a 32-wide tower, the projection's
    matmul failed)."""
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
