"""What every input builder shares (harness.build.inputs.base): the config scope formulas read and
the text config of a config with two."""

from __future__ import annotations

import torch

from harness.build.inputs.base import ConfigScope
from tests.harness.build.helpers import (
    built,
)


def test_fields_of_nested_sub_configs_are_found_after_the_direct_ones():
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING["nemo_speechlm"]()
    scope = ConfigScope(config)
    assert scope["num_mel_bins"] == config.audio_config.asr_config.num_mel_bins  # two levels down
    assert scope["model_type"] == "nemo_speechlm"  # the config itself is looked at first


def test_a_config_with_two_text_configs_gets_inputs_per_codebook():
    # MusicGen has a text encoder and a decoder: `get_text_config()` is ambiguous; the text
    # input's is the one, and the decoder's codes are one row per codebook
    from harness.build.inputs.base import text_config

    model, cfg, inputs = built("musicgen", "MusicgenForConditionalGeneration")
    assert text_config(cfg) is cfg.text_encoder
    books = cfg.decoder.num_codebooks
    assert inputs.kwargs["decoder_input_ids"].shape[0] == 2 * books
    assert inputs.kwargs["labels"].shape[-1] == books
    out = model(**inputs.kwargs)
    assert out.loss is not None and torch.isfinite(out.loss)
