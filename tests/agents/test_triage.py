"""Broken-config triage: one reason code per way a model cannot be built, first rule wins."""

from __future__ import annotations

import pytest

from agents import triage as t
from agents.triage import reason_codes, triage

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2}


@pytest.mark.parametrize(
    "model_id, config, kw, reason",
    [
        ("org/ok", GPT2, {}, None),
        ("/data/local/checkpoint-3890", GPT2, {}, "invalid_id"),
        ("org/repo.git", GPT2, {}, "invalid_id"),
        ("org/x", '{"model_type": "gpt2",', {}, "config_not_json"),
        ("org/x", b"\xff\xfe not utf8", {}, "config_not_json"),
        ("org/x", "[1, 2]", {}, "config_not_json"),
        ("org/x", None, {}, "no_config"),
        ("org/x", {"model_type": "mystery", "auto_map": {"AutoModel": "m.M"}}, {}, "trust_remote_code"),
        (
            "org/x",
            {"model_type": "gpt2", "architectures": ["MyGPT"], "auto_map": {"AutoModel": "m.MyGPT"}},
            {},
            "trust_remote_code",
        ),
        ("org/x", {"model_type": "mystery"}, {"tags": ["custom_code"]}, "trust_remote_code"),
        ("org/x", {"hidden_size": 8}, {}, "missing_model_type"),
        ("org/x", {"model_type": "not_a_type"}, {}, "unknown_model_type"),
        ("org/x", {"model_type": "bert", "architectures": ["BertForTimeTravel"]}, {}, "architecture_missing"),
        ("org/x", {"architectures": ["RWForCausalLM"]}, {}, "architecture_missing"),
        ("org/x", {"model_type": "llama", "hidden_size": "big"}, {}, "config_not_instantiable"),
        (
            "org/x",
            {"model_type": "zamba2", "num_hidden_layers": 3, "layer_types": ["mamba"]},
            {},
            "config_not_instantiable",
        ),
    ],
)
def test_reason_codes(model_id, config, kw, reason):
    verdict = triage(model_id, config, **kw)
    assert verdict.reason == reason, verdict.detail
    assert verdict.status == ("ok" if reason is None else "broken")
    if reason:
        assert verdict.detail


def test_native_type_with_auto_map_is_not_refused():
    """DeepSeek-V3-style configs carry an auto_map, but transformers has the type natively."""
    config = {
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    }
    assert triage("deepseek-ai/DeepSeek-R1", config).ok


@pytest.mark.parametrize(
    "arch, model_type",
    [
        ("T5ForConditionalGeneration", "t5"),
        ("GPT2LMHeadModel", "gpt2"),  # listed under gpt2 and gpt-sw3: the class's own module wins
        ("BertForSequenceClassification", "bert"),
    ],
)
def test_model_type_is_inferred_from_the_architecture(arch, model_type):
    verdict = triage("org/x", {"architectures": [arch]}, instantiate=False)
    assert verdict.ok and verdict.model_type == model_type and verdict.inferred_model_type


def test_listing_fields_fill_in_for_a_missing_config():
    verdict = triage("org/x", None, model_type="llama", architectures=["LlamaForCausalLM"])
    assert verdict.ok and verdict.model_type == "llama" and verdict.architectures == ["LlamaForCausalLM"]


def test_first_rule_wins():
    # not JSON beats everything after it; remote code beats unknown type
    assert triage("bad id!", "{").reason == "invalid_id"
    assert triage("org/x", {"model_type": "nope", "auto_map": {}}).reason == "trust_remote_code"


def test_weird_inputs_never_raise():
    for config in (
        {"model_type": 3},
        {"architectures": "GPT2LMHeadModel", "model_type": "gpt2"},
        {"architectures": [None, 5]},
        42,
        "",
        "null",
    ):
        verdict = triage("org/x", config)
        assert verdict.status in {"ok", "broken"}


def test_rules_file_and_checks_agree():
    codes = [r.code for r in t.rules().config_rules]
    assert set(codes) == set(t._CHECKS)
    assert len(reason_codes()) == len(set(reason_codes()))
    assert all(t.describe(c) for c in reason_codes())
