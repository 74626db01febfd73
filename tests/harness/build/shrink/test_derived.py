"""Widths derived from another width times a factor keep that relation after shrinking
(harness.build.shrink.derived). Each class of derived width on a real architecture: the relation
holds in the shrunk config and a forward on cpu passes."""

from __future__ import annotations

from harness.build.rules import shrink_rules
from harness.build.shrink.derived import keep_derived_widths
from tests.harness.build.helpers import (
    forward,
)


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


def test_a_swin_audio_tower_projects_its_last_stage_width():
    """CLAP's audio Swin doubles the patch-embedding width per stage and projects `hidden_size`
    features: the embedding width x 2^(stages - 1) must be the shrunk hidden size."""
    config = forward("clap", "ClapModel")
    a = config.audio_config
    assert a.patch_embeds_hidden_size * 2 ** (len(a.depths) - 1) == a.hidden_size


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
    changed = keep_derived_widths(original, shrunk, shrink_rules())
    assert changed == ["out_hidden_size"]
    assert (
        shrunk["out_hidden_size"] == 128 and shrunk["proj_size"] == 3000 and shrunk["intermediate_size"] == 64
    )
