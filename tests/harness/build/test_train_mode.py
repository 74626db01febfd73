"""A shrunk config ready for a deterministic training step (harness.build.train_mode): dropout
off, a pad token id for a decoder LM's classification, a free id for a placeholder token the
config leaves null, and a config with two text configs."""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.build.models import build_model, resolve_config
from tests.harness.build.helpers import (
    built,
    forward_passes,
    passes,
)


def test_dropout_is_zero_after_resolving():
    cfg = resolve_config(ModelSpec("test/bert", "bert", "BertForMaskedLM"))
    assert cfg.hidden_dropout_prob == 0.0 and cfg.attention_probs_dropout_prob == 0.0
    assert "bert.hidden_dropout_prob" in cfg._shrink_train_mode_changes
    model = build_model(cfg, "BertForMaskedLM")
    model.train()
    ids = torch.randint(5, 100, (2, 8))
    assert torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_backward_in_train_mode_is_deterministic_and_reformer_trains():
    """Reformer refuses backward in eval mode; with dropout 0 two runs give the same loss."""
    a = passes("reformer", "ReformerForMaskedLM")["backward"]
    b = passes("reformer", "ReformerForMaskedLM")["backward"]
    assert a["mode"] == "train" and a["loss"] == b["loss"] and a["loss_source"] == "labels"


def test_decoder_lm_classification_pads_with_the_pad_token():
    model, cfg, batch = built("llama", "LlamaForSequenceClassification")
    pad = cfg.pad_token_id
    assert pad is not None and 0 <= pad < cfg.vocab_size
    ids, mask = batch.kwargs["input_ids"], batch.kwargs["attention_mask"]
    assert (ids[mask == 0] == pad).all() and (mask == 0).any() and (ids[mask == 1] != pad).all()


def test_a_null_placeholder_token_id_gets_a_free_id_and_the_processors_count():
    # BLIP-2's default config defines image_token_id but leaves it None; its processor inserts
    # num_query_tokens image tokens per image
    model, cfg, inputs = built("blip-2", "Blip2Model")
    assert isinstance(cfg.image_token_id, int) and 0 <= cfg.image_token_id < cfg.text_config.vocab_size
    ids = inputs.kwargs["input_ids"]
    assert ((ids == cfg.image_token_id).sum(-1) == cfg.num_query_tokens).all()
    metrics = forward_passes("blip-2", "Blip2Model")
    assert any(c.endswith((".image_token_id", ".image_token_index")) for c in metrics["train_mode_changes"])


def test_a_config_with_two_text_configs_resolves():
    """MusicGen has a text encoder and a decoder, so `get_text_config()` is ambiguous: preparing
    the config for training still resolves, at the strongest level."""
    config = resolve_config(ModelSpec("catalog/musicgen", "musicgen", "MusicgenForCausalLM"))
    assert config._shrink_level == "full"
