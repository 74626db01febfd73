"""Token ids after shrinking (harness.build.shrink.tokens): inside the shrunk vocab, and inside a
vocab the budget pass cut."""

from __future__ import annotations

from tests.harness.build.helpers import (
    built,
    forward,
    runs,
)


def test_token_ids_follow_a_vocab_the_budget_pass_quartered():
    """Parakeet-TDT's blank id is its vocab's last: the token map moves it to the top of the
    target vocab, then the budget pass quarters the vocab and the id moves inside the cut one
    (else the loss indexes past the logits). Its transducer labels are one fewer than the decoder's ids."""
    config = forward("parakeet_tdt", "ParakeetForTDT")
    assert "vocab_size" in config._shrink_budget_changes
    assert 0 <= config.blank_token_id < config.vocab_size and config.pad_token_id < config.vocab_size


def test_token_ids_follow_a_vocab_the_budget_pass_cut():
    # Florence-2's text vocab is cut 1024 -> 256 by the parameter budget: its image token id,
    # remapped to the top of the 1024-token vocab, must move inside the cut one
    model, cfg, inputs = built("florence2", "Florence2ForConditionalGeneration")
    assert "text_config.vocab_size" in cfg._shrink_budget_changes
    assert 0 <= cfg.image_token_id < cfg.text_config.vocab_size
    assert int(inputs.kwargs["input_ids"].max()) < cfg.text_config.vocab_size
    runs(model, inputs)


def test_a_token_id_the_modeling_code_hard_codes_is_moved_into_the_vocab():
    # ShieldGemma-2 scores the logits of its yes/no tokens, read with getattr defaults
    # (10784, 3771) its config does not hold
    model, cfg, inputs = built("shieldgemma2", "ShieldGemma2ForImageClassification")
    vocab = cfg.text_config.vocab_size
    assert 0 <= model.yes_token_index < vocab and 0 <= model.no_token_index < vocab
    runs(model, inputs)
