"""The shrinker keeps each tricky architecture's defining fields while making the model tiny."""

from __future__ import annotations

import json

import pytest

from contracts.records import ModelSpec
from harness.build.models import count_parameters_meta, resolve_config
from harness.build.shrink import rules, shrink_config, shrink_dict
from harness.build.shrink.layers import select_layers
from harness.build.signature import architecture_signature

BUDGET = rules()["targets"]["max_parameters"]
SEQ = rules()["targets"]["test_sequence_length"]


def shrunk(model_type: str, architecture: str = "", **config):
    spec = ModelSpec(f"test/{model_type}", model_type, architecture, dict(config, model_type=model_type))
    cfg = resolve_config(spec)
    from harness.build.models import architecture_of

    params = count_parameters_meta(cfg, architecture_of(spec))
    assert params < BUDGET, f"{model_type}: {params} parameters"
    assert cfg._shrink_level == "full", cfg._shrink_errors
    return cfg


def test_gqa_ratio_and_size_llama():
    cfg = shrunk(
        "llama",
        "LlamaForCausalLM",
        num_attention_heads=32,
        num_key_value_heads=8,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        vocab_size=128256,
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
    )
    assert cfg.num_attention_heads // cfg.num_key_value_heads == 4
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0
    assert cfg.num_hidden_layers == 2 and cfg.hidden_size < 4096 and cfg.vocab_size <= 1024
    assert cfg.rope_parameters["rope_type"] == "llama3" and cfg.rope_parameters["factor"] == 8.0


def test_mha_stays_mha_and_mqa_stays_mqa():
    mha = shrunk("llama", num_attention_heads=16, num_key_value_heads=16)
    assert mha.num_attention_heads == mha.num_key_value_heads
    mqa = shrunk("falcon", num_attention_heads=71, new_decoder_architecture=False, multi_query=True)
    assert mqa.multi_query is True


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


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_encoder_decoder(model_type):
    cfg = shrunk(model_type)
    assert cfg.is_encoder_decoder
    layers = [
        getattr(cfg, f)
        for f in ("num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")
        if hasattr(cfg, f)
    ]
    assert layers and all(1 <= n <= 2 for n in layers)


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


def test_multimodal_subconfigs_shrink_and_token_ids_fit():
    llava = shrunk("llava")
    assert llava.text_config.hidden_size < 4096 and llava.vision_config.hidden_size < 1024
    assert llava.image_token_id < llava.text_config.vocab_size
    q = shrunk("qwen2_vl")
    assert q.image_token_id < q.text_config.vocab_size and q.video_token_id < q.text_config.vocab_size
    assert len({q.image_token_id, q.video_token_id, q.vision_start_token_id, q.vision_end_token_id}) == 4
    head_dim = q.text_config.hidden_size // q.text_config.num_attention_heads
    assert sum(q.text_config.rope_parameters["mrope_section"]) == head_dim // 2


def test_layer_selection_prefix_period_and_index_lists():
    r = rules()
    d = {"layer_types": ["a", "a", "b"] * 4, "mlp_only_layers": [0, 1], "first_k_dense_replace": 2}
    plan = select_layers(d, 12, r, 2)
    kinds = plan.updates["layer_types"]
    assert set(kinds) == {"a", "b"} and plan.updates["first_k_dense_replace"] == 1
    assert plan.updates["mlp_only_layers"] == [0]
    # an irregular pattern keeps the first layer of each kind, in order
    plan = select_layers({"hybrid_override_pattern": "MM*M-MMM*"}, 9, r, 2)
    assert plan.updates["hybrid_override_pattern"] == "M*-"


def test_partial_config_and_pretrained_config_inputs():
    from transformers import BertConfig

    a = shrink_config({"model_type": "bert", "hidden_size": 1024, "num_attention_heads": 16})
    b = shrink_config(BertConfig(hidden_size=1024, num_attention_heads=16))
    assert a.to_dict()["hidden_size"] == b.to_dict()["hidden_size"] < 1024


def test_quantization_and_remote_code_fields_are_dropped():
    d = shrink_dict(
        {
            "model_type": "llama",
            "quantization_config": {"quant_method": "fp8"},
            "auto_map": {"AutoConfig": "x.Y"},
            "num_hidden_layers": 4,
        }
    )
    assert "quantization_config" not in d and "auto_map" not in d


def test_architecture_signature_dedups_identical_architectures():
    base = {
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
    }
    a = ModelSpec("org/a", "llama", "LlamaForCausalLM", dict(base, hidden_size=4096))
    b = ModelSpec(
        "org/b-instruct", "llama", "LlamaForCausalLM", dict(base, hidden_size=4096, _name_or_path="b")
    )
    c = ModelSpec("org/c", "llama", "LlamaForCausalLM", dict(base, num_key_value_heads=4))  # ratio 8
    d = ModelSpec("org/a", "llama", "LlamaForSequenceClassification", dict(base, hidden_size=4096))
    sa, sb, sc, sd = (architecture_signature(s) for s in (a, b, c, d))
    assert sa == sb and sa != sc and sa != sd


@pytest.mark.slow
@pytest.mark.shared_data
def test_every_full_hub_config_of_a_known_type_shrinks_under_budget(full_configs_path):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from harness.build.models import UnknownArchitecture, model_class

    rows = [json.loads(line) for line in full_configs_path.read_text().splitlines() if line.strip()]
    known = [r for r in rows if r["config"].get("model_type") in CONFIG_MAPPING_NAMES]
    assert len(known) >= 70
    for row in known:
        cfg = row["config"]
        arch = (cfg.get("architectures") or [""])[0]
        try:
            model_class(arch)
        except UnknownArchitecture:
            arch = ""  # the type is known but not this class name: its base model
        spec = ModelSpec(row["id"], cfg["model_type"], arch, cfg)
        shrunk_cfg = resolve_config(spec)
        from harness.build.models import architecture_of

        params = count_parameters_meta(shrunk_cfg, architecture_of(spec))
        assert params < BUDGET, (row["id"], params)
        assert (
            "quantization_config" not in shrunk_cfg.to_dict()
            or not shrunk_cfg.to_dict()["quantization_config"]
        )


def test_a_level_the_model_rejects_keeps_the_first_nonblank_line_of_its_error():
    """transformers' requires_backends errors start with a newline: the reason must still name the cause."""
    from harness.build.shrink import ShrinkError

    def validate(cfg):
        raise ImportError(
            "\nDinatModel requires the natten library but it was not found in your environment.\n"
        )

    with pytest.raises(ShrinkError) as info:
        shrink_config({"model_type": "bert"}, "bert", validate=validate)
    assert "requires the natten library" in str(info.value)
    assert all("natten" in reason for reason in info.value.errors.values())


def test_chained_stage_width_lists_scale_together_and_detector_channel_lists_follow():
    """HGNetV2 (the D-FINE/DEIMv2 backbone) chains its per-stage lists: the stem's output is the
    first stage's input, each stage's output the next one's input. One factor for every list keeps
    the chain; the detector's encoder inputs follow the backbone's stage outputs and its decoder
    inputs the encoder's width. D-FINE then runs forward."""
    import torch

    from harness.build.inputs import make_inputs
    from harness.build.models import build_model

    config = resolve_config(ModelSpec("catalog/d_fine/DFineModel", "d_fine", "DFineModel"))
    b = config.backbone_config
    assert b.stage_in_channels[0] == b.stem_channels[-1]
    assert b.stage_in_channels[1:] == b.stage_out_channels[:-1]
    assert b.stage_in_channels[0] <= rules()["stage_width_first"] < b.stage_out_channels[-1]
    outs = dict(zip(b.stage_names[1:], b.stage_out_channels))
    assert config.encoder_in_channels == [outs[s] for s in b.out_features]
    assert config.decoder_in_channels == [config.encoder_hidden_dim] * len(config.decoder_in_channels)
    model = build_model(config, "DFineModel")
    with torch.no_grad():
        out = model(**make_inputs(model, config, "DFineModel").kwargs)
    assert out.last_hidden_state.shape[-1] == config.d_model


def test_token_ids_follow_a_vocab_the_budget_pass_quartered():
    """Parakeet-TDT's blank id is its vocab's last: the first pass moved it to the top of the
    target vocab, then the budget pass quartered the vocab and left it above (the loss indexed
    past the logits). Its transducer labels are one fewer than the decoder's ids."""
    from tests.harness.build.shrink_helpers import forward

    config = forward("parakeet_tdt", "ParakeetForTDT")
    assert "vocab_size" in config._shrink_budget_changes
    assert 0 <= config.blank_token_id < config.vocab_size and config.pad_token_id < config.vocab_size


def test_a_per_layer_vocabulary_is_brought_under_budget_but_not_below_the_token_ids():
    """Gemma-3n's per-layer embeddings are a `vocab_size_per_layer_input` x (layers x width) table
    (262,144 rows: 269M parameters after every named rule). Its name holds a word the budget pass
    never touches ("layer"), but it is a vocabulary: it is quartered like any table, and never below
    the shrunk main vocabulary, whose token ids index it."""
    from tests.harness.build.shrink_helpers import forward

    config = forward("gemma3n_text", "Gemma3nForCausalLM")
    assert config._shrink_parameters < BUDGET
    assert "vocab_size_per_layer_input" in config._shrink_budget_changes
    assert config.vocab_size <= config.vocab_size_per_layer_input < 262144


def test_a_codec_whose_widths_double_per_stage_is_shrunk_by_its_base_width():
    """VibeVoice's acoustic tokenizer doubles 32 filters at each of six stages (2,048 channels,
    130M parameters): only its base width, below the pass's old 48 floor, brings it down."""
    from tests.harness.build.shrink_helpers import forward

    config = forward("vibevoice_acoustic_tokenizer_encoder", "VibeVoiceAcousticTokenizerEncoderModel")
    assert "num_filters" in config._shrink_budget_changes and config.num_filters < 32
    assert config._shrink_parameters < 130_485_408 // 10


def test_a_pure_ssm_names_its_heads_like_attention_and_shrinks_fully():
    """Mamba-2 validates num_heads x head_dim == expand x hidden: its heads are the SSM's, not
    attention heads of 16 (which failed validation at every width level: 215M parameters)."""
    from tests.harness.build.shrink_helpers import forward

    config = forward("mamba2", "Mamba2ForCausalLM")
    assert config._shrink_level == "full" and config._shrink_parameters < BUDGET
    assert config.num_heads * config.head_dim == config.expand * config.hidden_size
    assert config.num_heads % config.n_groups == 0


def test_a_time_series_context_is_a_few_patches_long():
    """TimesFM-2.5 reads a 16,384-step context as 512 patches in a Python loop Dynamo unrolls (a
    28,000-node graph); a few patches test the same code."""
    from tests.harness.build.shrink_helpers import forward

    config = forward("timesfm2_5", "TimesFm2_5ModelForPrediction")
    assert config.context_length == rules()["context_patches"] * config.patch_length
