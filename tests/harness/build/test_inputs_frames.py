"""Audio inputs whose sizes live deep in a composite config, and spectrograms padded to whole
groups of stacked frames as the model's processor pads them (harness.build.inputs)."""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.build.inputs.base import ConfigScope
from harness.build.inputs.processors import pad_frames
from harness.stages.check import check_model


def test_pad_frames_pads_the_frame_axis_and_its_mask():
    feats, mask = torch.ones(2, 26, 4), torch.ones(2, 26, dtype=torch.long)
    out = pad_frames({"input_features": feats, "attention_mask": mask}, 8)
    assert out["input_features"].shape == (2, 32, 4) and out["attention_mask"].shape == (2, 32)
    assert out["input_features"][:, 26:].abs().sum() == 0 and out["attention_mask"][:, 26:].sum() == 0
    no_mask = pad_frames({"input_features": feats}, 8)  # without a mask: axis 1
    assert no_mask["input_features"].shape == (2, 32, 4)
    same = pad_frames({"input_features": feats[:, :24], "attention_mask": mask[:, :24]}, 8)
    assert same["input_features"].shape == (2, 24, 4)


def test_fields_of_nested_sub_configs_are_found_after_the_direct_ones():
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING["nemo_speechlm"]()
    scope = ConfigScope(config)
    assert scope["num_mel_bins"] == config.audio_config.asr_config.num_mel_bins  # two levels down
    assert scope["model_type"] == "nemo_speechlm"  # the config itself is looked at first


def test_a_speech_llm_that_stacks_frames_runs_with_its_feature_extractor_inputs():
    """nemo_speechlm (Nemotron 3.5 Transcribe): mel bins two sub-configs down, and a frame count
    the model requires to be a multiple of `subsampling_factor` (its processor pads to it)."""
    spec = ModelSpec("test/nemo_speechlm", "nemo_speechlm", "Nemotron3_5TranscribeForConditionalGeneration")
    result = check_model(spec, backend="cpu", stages=["load", "forward", "backward"])
    bad = {s: r.reason for s, r in result.stages.items() if r.status.value != "pass"}
    assert not bad, bad
    sources = result.stages["load"].metrics["input_sources"]
    assert sources["input_features"].startswith("processor:")


def test_a_recipe_whose_fill_names_a_field_the_config_lacks_does_not_apply():
    """X-MOD's `lang_ids` recipe draws below `len(languages)`; FastSpeech2-Conformer also takes
    `lang_ids` but has no `languages`: the recipe does not apply there (it raised NameError)."""
    from transformers import CONFIG_MAPPING

    from harness.build.inputs.base import Maker
    from harness.build.inputs.recipes import recipe_input

    def lang_ids(model_type):
        config = CONFIG_MAPPING[model_type]()
        scope = ConfigScope(config, batch=2, seq=16, vocab=config.vocab_size, arch="")
        return recipe_input("lang_ids", model_type, Maker(config, 0, 16, set()), scope)

    tensor, key, _ = lang_ids("xmod")
    assert (
        key == "lang_ids"
        and tensor.shape == (2,)
        and int(tensor.max()) < len(CONFIG_MAPPING["xmod"]().languages)
    )
    assert lang_ids("fastspeech2_conformer") is None
