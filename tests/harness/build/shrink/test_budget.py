"""The parameter budget pass (harness.build.shrink.budget): halving the sizes no rule names, chained
widths together, never a vocabulary below the token ids."""

from __future__ import annotations

import pytest

from harness.build.shrink.budget import fit_budget
from tests.harness.build.helpers import (
    BUDGET,
    forward,
)


def test_the_budget_halves_chained_widths_together():
    """A width the budget pass halves is halved in every width field that names it, at any level:
    EfficientNet-like in/out channel chains and ZoeDepth's `bottleneck_features` (its fusion width)."""
    config = {
        "in_channels": [32, 96, 192],
        "out_channels": [96, 192, 320],
        "head": {"fusion_hidden_size": 320, "bottleneck_features": 320, "num_labels": 320},
    }

    def count(d):  # the model "builds" only while the chain agrees
        assert d["in_channels"][1:] == d["out_channels"][:-1]
        assert d["head"]["bottleneck_features"] == d["head"]["fusion_hidden_size"]
        return sum(d["out_channels"]) * 1000

    shrunk, params, changed = fit_budget(config, count, 200_000)
    assert changed and params < 200_000
    assert shrunk["in_channels"][1:] == shrunk["out_channels"][:-1]
    assert shrunk["head"]["num_labels"] == 320  # not a width


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("efficientnet", "EfficientNetModel"),
        ("zoedepth", "ZoeDepthForDepthEstimation"),
    ],
)
def test_budgeted_and_rule_shrunk_cnns_run(model_type, architecture):
    forward(model_type, architecture)


def test_a_per_layer_vocabulary_is_brought_under_budget_but_not_below_the_token_ids():
    """Gemma-3n's per-layer embeddings are a `vocab_size_per_layer_input` x (layers x width) table
    (262,144 rows: 269M parameters after every named rule). Its name holds a word the budget pass
    never touches ("layer"), but it is a vocabulary: it is quartered like any table, and never below
    the shrunk main vocabulary, whose token ids index it."""
    config = forward("gemma3n_text", "Gemma3nForCausalLM")
    assert config._shrink_parameters < BUDGET
    assert "vocab_size_per_layer_input" in config._shrink_budget_changes
    assert config.vocab_size <= config.vocab_size_per_layer_input < 262144


def test_a_codec_whose_widths_double_per_stage_is_shrunk_by_its_base_width():
    """VibeVoice's acoustic tokenizer doubles 32 filters at each of six stages (2,048 channels,
    130M parameters): only its base width, quartered below 48, brings it down."""
    config = forward("vibevoice_acoustic_tokenizer_encoder", "VibeVoiceAcousticTokenizerEncoderModel")
    assert "num_filters" in config._shrink_budget_changes and config.num_filters < 32
    assert config._shrink_parameters < 130_485_408 // 10
