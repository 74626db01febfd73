"""Inputs shaped by the forward's docstring (harness.build.inputs.docshapes), and inputs it says are
not used left out."""

from __future__ import annotations

import pytest

from harness.build.inputs.docshapes import documented_shapes
from tests.harness.build.helpers import (
    built,
    runs,
    trains,
)


def test_documented_shapes_are_read_from_the_forward_docstring():
    import transformers

    shapes = documented_shapes(transformers.MuseGlimmerAssistantModel.forward)
    assert shapes["context_hidden_states"][1] == [
        "batch_size",
        "number_of_previous_accepted_tokens",
        "dim * len(config.target_layer_ids)",
    ]


@pytest.mark.parametrize(
    "model_type, architecture, names",
    [
        ("blip_2_qformer", "Blip2QFormerModel", ["query_embeds"]),
        ("mimi_decoder", "MimiDecoderModel", ["latents"]),
        (
            "muse_glimmer_assistant",
            "MuseGlimmerAssistantModel",
            ["noise_embeds", "context_hidden_states", "attention_mask"],
        ),
    ],
)
def test_required_inputs_get_their_documented_shape(model_type, architecture, names):
    model, cfg, inputs = built(model_type, architecture)
    assert all(inputs.sources[n] == "docstring" for n in names)
    runs(model, inputs)


def test_an_input_the_forward_documents_as_unused_is_not_given():
    # Qwen2-Audio's encoder documents attention_mask as "preserved for compatibility, but it is
    # not used" and still hands a given one to its layers as an additive float mask
    model, cfg, inputs = built("qwen2_audio_encoder", "Qwen2AudioEncoder")
    assert "attention_mask" not in inputs.kwargs and inputs.sources["input_features"].startswith("processor:")
    trains(model, inputs)
