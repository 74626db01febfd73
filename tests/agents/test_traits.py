"""Trait extraction: accuracy against hand labels of real configs, the unknown rule, the CLI."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from agents.traits import TRAIT_NAMES, extract_traits, traits_for_row
from agents.vocabulary import UNKNOWN, allowed_values

LABELS = Path(__file__).resolve().parent.parent / "data" / "trait_labels.json"


def _labels() -> dict:
    return json.loads(LABELS.read_text())


@pytest.fixture(scope="module")
def labelled_rows(hub_models_path):
    want = {m["id"] for m in _labels()["models"]}
    rows = {}
    with gzip.open(hub_models_path, "rt") as f:
        for line in f:
            r = json.loads(line)
            if r["id"] in want:
                r["config"] = json.dumps(r["config"]) if r.get("config") is not None else None
                rows[r["id"]] = r
    return rows


@pytest.mark.shared_data
def test_labels_reference_at_least_40_real_models(labelled_rows):
    models = _labels()["models"]
    assert len(models) >= 40
    assert len({m["id"] for m in models}) == len(models)
    missing = [m["id"] for m in models if m["id"] not in labelled_rows]
    assert not missing, f"labelled ids not in the shared population: {missing}"
    assert {lvl for r in labelled_rows.values() for lvl in [r.get("config_level")]} >= {
        "full",
        "partial",
        "arch_only",
    }


@pytest.mark.shared_data
def test_accuracy_per_trait_against_labels(labelled_rows):
    """Every trait must match the hand labels on >= 95% of the labelled configs."""
    mismatches: list[str] = []
    wrong = Counter()
    models = _labels()["models"]
    for m in models:
        got = traits_for_row(labelled_rows[m["id"]]).to_dict()
        for trait, want in m["traits"].items():
            if got[trait] != want:
                wrong[trait] += 1
                mismatches.append(f"{m['id']}: {trait} want {want} got {got[trait]}")
    accuracy = {t: 1 - wrong[t] / len(models) for t in TRAIT_NAMES}
    print("per-trait accuracy:", json.dumps(accuracy))
    held = {m["id"] for m in models if m.get("held_out")}
    held_wrong = [x for x in mismatches if x.split(": ")[0] in held]
    print(
        f"held-out models: {len(held)}, "
        f"mismatching labels: {len(held_wrong)} of {len(held) * len(TRAIT_NAMES)}"
    )
    print("mismatches:\n  " + "\n  ".join(mismatches))
    low = {t: round(a, 3) for t, a in accuracy.items() if a < 0.95}
    assert not low, f"traits below 95%: {low}; mismatches: {mismatches}"
    # a mismatch may only ever be a cautious "unknown", never a confidently wrong value
    confident_wrong = [x for x in mismatches if not x.endswith(f"got {UNKNOWN}")]
    assert not confident_wrong, confident_wrong


@pytest.mark.shared_data
def test_full_configs_stay_in_the_vocabulary(full_configs_path):
    seen = Counter()
    for line in full_configs_path.read_text().splitlines():
        rec = extract_traits(json.loads(line)["config"], config_level="full").to_dict()
        for trait, value in rec.items():
            allowed = allowed_values(trait)
            assert allowed is None or value in allowed, (trait, value)
            seen[trait, value] += 1
    # the 86 current LLMs exercise the interesting values
    for tv in [
        ("attention", "mla"),
        ("layer_mix", "attention+ssm"),
        ("layer_mix", "attention+linear"),
        ("attention_pattern", "local_global"),
        ("moe", "moe+shared"),
        ("rope_scaling", "yarn"),
        ("quantization", "nvfp4"),
        ("quantization", "mxfp4"),
        ("modality", "multimodal"),
    ]:
        assert seen[tv], tv


def test_incomplete_config_is_unknown_not_the_type_default():
    # a listing that only names the type: llama lets kv heads and rope scaling vary -> unknown
    listing = extract_traits(
        {"model_type": "llama"}, architectures=["LlamaForCausalLM"], config_level="arch_only"
    )
    assert listing.attention == UNKNOWN and listing.rope_scaling == UNKNOWN and listing.dtype == UNKNOWN
    # ...but what the type fixes is known
    assert (listing.position, listing.norm, listing.structure, listing.head) == (
        "rope",
        "rmsnorm",
        "decoder",
        "causal_lm",
    )
    partial = extract_traits(
        {"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 8}, config_level="partial"
    )
    assert partial.attention == "gqa-4"
    # a complete config.json missing the key means the class default (MHA for llama)
    full = extract_traits({"model_type": "llama", "num_attention_heads": 32}, config_level="full")
    assert full.attention == "mha" and full.quantization == "none"


def test_alias_keys_and_text_subconfig():
    cfg = {
        "model_type": "llava",
        "architectures": ["LlavaForConditionalGeneration"],
        "text_config": {
            "model_type": "llama",
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
        },
        "vision_config": {"model_type": "clip_vision_model"},
    }
    rec = extract_traits(cfg, config_level="full")
    assert (rec.modality, rec.attention, rec.rope_scaling, rec.head) == (
        "multimodal",
        "gqa-8",
        "yarn",
        "image_text_to_text",
    )
    moe = extract_traits(
        {"model_type": "mixtral", "num_local_experts": 64, "num_experts_per_tok": 1, "n_shared_experts": 2},
        config_level="full",
    )
    assert (moe.moe, moe.moe_experts, moe.moe_top_k) == ("moe+shared", "9-64", "1")


def test_unknown_model_type_reads_only_what_is_there():
    rec = extract_traits(
        {"model_type": "acme_mystery", "rms_norm_eps": 1e-6, "num_attention_heads": 8},
        architectures=["AcmeMysteryForCausalLM"],
        config_level="full",
    )
    assert rec.norm == "rmsnorm" and rec.head == "causal_lm" and rec.structure == "decoder"
    assert rec.attention == UNKNOWN  # no kv-head count in custom code proves nothing
    assert extract_traits({}, config_level="full") == extract_traits(None)


def test_cli_prints_one_json_record(tmp_path, capsys):
    from harness.cli import main

    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "n_head": 12,
                "architectures": ["GPT2LMHeadModel"],
                "activation_function": "gelu_new",
                "tie_word_embeddings": True,
            }
        )
    )
    assert main(["traits", str(path), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert set(rec) == set(TRAIT_NAMES)
    assert (
        rec["model_type"],
        rec["attention"],
        rec["position"],
        rec["activation"],
        rec["tied_embeddings"],
    ) == ("gpt2", "mha", "absolute", "gelu", "tied")
    assert main(["traits", str(path)]) == 0
    assert "attention" in capsys.readouterr().out


def test_cli_rejects_a_non_object_config(tmp_path, capsys):
    from harness.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["traits", str(bad)]) == 2
    assert "JSON object" in capsys.readouterr().err
    bad.write_text("{not json")
    assert main(["traits", str(bad), "--json"]) == 2
