"""Partial Hub configs (a dump's size summary) keep only fields their config class really has."""

from __future__ import annotations

import json

import pytest

from agents.partial_config import dropped_fields, normalize_partial
from agents.store import ModelRecord

# rows as the shared snapshot has them (llmfit's summaries of real models)
DEEPSEEK_R1_0528 = {
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "head_dim": 56,
    "hidden_size": 7168,
    "vocab_size": 129280,
    "moe_intermediate_size": 2048,
    "num_experts": 256,
    "active_experts": 8,
    "context_length": 6553600,
    "model_type": "deepseek_v3",
    "is_moe": True,
}
GEMMA4_31B = {
    "num_hidden_layers": 60,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "head_dim": 256,
    "hidden_size": 5376,
    "vocab_size": 262144,
    "context_length": 262144,
    "model_type": "gemma4",
}
QWEN3_MOE_TINY = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 4,
    "hidden_size": 16,
    "vocab_size": 151936,
    "moe_intermediate_size": 768,
    "num_experts": 4,
    "active_experts": 2,
    "context_length": 262144,
    "model_type": "qwen3_moe",
    "is_moe": True,
}
ZAMBA2_1B = {
    "num_hidden_layers": 38,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 64,
    "hidden_size": 2048,
    "vocab_size": 32000,
    "context_length": 4096,
    "model_type": "zamba2",
}


def test_fields_the_class_derives_or_does_not_have_are_dropped():
    # DeepSeek-V3's head size is qk_rope_head_dim; the dump's head_dim is hidden / heads = 56
    out = normalize_partial(DEEPSEEK_R1_0528)
    assert "head_dim" not in out and "context_length" not in out and "is_moe" not in out
    assert out["hidden_size"] == 7168 and out["num_hidden_layers"] == 61 and out["vocab_size"] == 129280
    assert set(dropped_fields(DEEPSEEK_R1_0528)) == {"head_dim", "context_length", "is_moe"}


def test_summary_names_set_the_classs_own_field():
    # agents/data/partial_fields.yaml: active_experts is top-k, whatever the class calls it
    out = normalize_partial(DEEPSEEK_R1_0528)
    assert out["n_routed_experts"] == 256 and out["num_experts_per_tok"] == 8
    assert "num_experts" not in out and "active_experts" not in out
    qwen = normalize_partial(QWEN3_MOE_TINY)
    assert qwen["num_experts"] == 4 and qwen["num_experts_per_tok"] == 2


def test_a_field_the_class_takes_is_kept():
    llama = {"model_type": "llama", "head_dim": 128, "hidden_size": 4096, "context_length": 8192}
    assert normalize_partial(llama) == {"model_type": "llama", "head_dim": 128, "hidden_size": 4096}


def test_text_sizes_of_a_composite_config_move_into_its_text_config():
    out = normalize_partial(GEMMA4_31B)
    assert "num_hidden_layers" not in out
    assert out["text_config"]["num_hidden_layers"] == 60 and out["text_config"]["head_dim"] == 256


def test_a_layer_count_against_the_defaults_per_layer_list_is_dropped():
    out = normalize_partial(ZAMBA2_1B)
    assert "num_hidden_layers" not in out and out["hidden_size"] == 2048
    from transformers import Zamba2Config

    Zamba2Config(**{k: v for k, v in out.items() if k != "model_type"})  # the class accepts it now


def test_unknown_types_and_full_configs_are_left_alone():
    odd = {"model_type": "not_a_type_xyz", "head_dim": 3}
    assert normalize_partial(odd) == odd
    full = ModelRecord(
        id="a/b",
        source="snapshot",
        model_type="deepseek_v3",
        config=json.dumps(DEEPSEEK_R1_0528),
        config_level="full",
    )
    assert full.to_spec().config["head_dim"] == 56  # a config.json is applied as transformers would
    partial = ModelRecord(
        id="a/b",
        source="snapshot",
        model_type="deepseek_v3",
        config=json.dumps(DEEPSEEK_R1_0528),
        config_level="partial",
    )
    assert "head_dim" not in partial.to_spec().config


@pytest.mark.parametrize(
    "model_id,summary",
    [("deepseek-ai/DeepSeek-R1-0528", DEEPSEEK_R1_0528), ("np-cr/testing-qwen3-moe", QWEN3_MOE_TINY)],
)
def test_the_summary_of_a_real_model_builds_and_runs_forward_on_cpu(model_id, summary):
    # before: DeepSeek's rotary embedding got head_dim 56 ("size of tensor a (4) must match ... (8)"),
    # Qwen3-MoE kept the default top-8 of its 4 experts ("selected index k out of range")
    from harness.stages.check import check_model

    spec = ModelRecord(
        id=model_id,
        source="snapshot",
        model_type=summary["model_type"],
        status="ok",
        config=json.dumps(summary),
        config_level="partial",
    ).to_spec()
    forward = check_model(spec, backend="cpu", stages=["load", "forward"]).stages["forward"]
    assert forward.status == "pass", forward


def test_a_summarys_quotient_head_dim_for_a_type_whose_head_dim_is_no_quotient_is_dropped():
    """LongCat-Flash's `head_dim` is its rotary size (64 in the default, = qk_rope_head_dim); the
    dump's 96 is hidden / heads (before: the rotary embedding got 96, "size of tensor a (4) must
    match ... (8)" after shrinking). A type whose head_dim is the quotient keeps it (Llama above)."""
    longcat = {
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "head_dim": 96,
        "hidden_size": 6144,
        "vocab_size": 131072,
        "context_length": 131072,
        "model_type": "longcat_flash",
    }
    out = normalize_partial(longcat)
    assert "head_dim" not in out and out["hidden_size"] == 6144
    assert normalize_partial({**longcat, "head_dim": 128})["head_dim"] == 128  # no quotient: the model's own
