"""Labels for the head's own loss (harness.build.inputs.labels), and none for a head that refuses
them or could not get a loss from them. Each on a real architecture."""

from __future__ import annotations

import pytest
import torch

from harness.build.inputs import make_inputs
from tests.harness.build.helpers import (
    built,
    model_of,
    runs,
    trains,
)


def test_surrogate_when_the_head_has_no_labels():
    model, cfg = model_of("bert", "BertModel")
    batch = make_inputs(model, cfg, "BertModel", seed=0)
    assert not batch.has_labels and "labels" not in batch.kwargs


def test_detection_labels_are_normalized_boxes_per_image():
    _, cfg, batch = built("detr", "DetrForObjectDetection")
    targets = batch.kwargs["labels"]
    assert len(targets) == 2
    for t in targets:
        assert t["boxes"].shape[1] == 4 and ((t["boxes"] > 0) & (t["boxes"] <= 1)).all()
        assert (t["class_labels"] < cfg.num_labels).all()


def test_a_head_whose_forward_builds_an_output_without_a_loss_gets_no_labels():
    # ShieldGemma-2's classifier hands `labels` on to the causal LM inside and returns only the
    # yes/no logits: (batch,) class labels would reach the LM loss as a shape error. Its yes/no
    # token ids are set here inside the shrunk vocab
    model, cfg, inputs = built(
        "shieldgemma2", "ShieldGemma2ForImageClassification", yes_token_index=5, no_token_index=6
    )
    assert not inputs.labels and "labels" not in inputs.kwargs
    assert any("no loss" in note for note in inputs.notes)
    trains(model, inputs)
    # a head that returns its parent's forward keeps its labels (Gemma-3 classification)
    model, cfg, inputs = built("gemma3", "Gemma3ForSequenceClassification")
    assert inputs.labels == ["labels"]


def test_text_to_speech_labels_are_mel_frames():
    # SpeechT5's TTS head is trained on the target spectrogram, shifted into its speech decoder
    model, cfg, inputs = built("speecht5", "SpeechT5ForTextToSpeech")
    labels = inputs.kwargs["labels"]
    assert labels.is_floating_point() and labels.shape[-1] == cfg.num_mel_bins
    assert labels.shape[1] % cfg.reduction_factor == 0
    out = model(**inputs.kwargs)
    assert out.loss is not None and torch.isfinite(out.loss)


def test_a_head_whose_forward_refuses_labels_gets_none():
    model, cfg, inputs = built("omdet-turbo", "OmDetTurboForObjectDetection")
    assert "labels" not in inputs.kwargs and not inputs.labels
    assert inputs.sources["classes_structure"].startswith("recipe:")
    assert int(inputs.kwargs["classes_structure"].sum()) == inputs.kwargs["classes_input_ids"].shape[0]


def test_a_generative_qa_head_gets_answer_tokens():
    # BLIP's VQA head has no span positions: it is trained on the answer's token ids
    model, cfg, inputs = built("blip", "BlipForQuestionAnswering")
    assert inputs.labels == ["labels"] and inputs.kwargs["labels"].dtype == torch.long
    runs(model, inputs)
    # a table QA head's forward decodes nothing: no answer tokens for it
    model, cfg, inputs = built("tapas", "TapasForQuestionAnswering")
    assert "labels" not in inputs.labels


def test_a_head_whose_loss_cannot_be_called_as_its_forward_calls_it_gets_no_labels():
    # NemotronAsrStreamingForRNNT is unknown to transformers' LOSS_MAPPING: its loss falls back
    # to ForCausalLMLoss, which requires vocab_size, and the forward never passes it
    model, cfg, inputs = built("nemotron_asr_streaming", "NemotronAsrStreamingForRNNT")
    assert "labels" not in inputs.kwargs and not inputs.labels
    assert any("vocab_size" in n for n in inputs.notes)
    runs(model, inputs)
    # a head whose forward calls its loss fully keeps its labels
    model, cfg, inputs = built("parakeet_ctc", "ParakeetForCTC")
    assert inputs.labels == ["labels"]


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("pp_doclayout_v4", "PPDocLayoutV4ForObjectDetection"),  # "does not support training"
        ("superglue", "SuperGlueForKeypointMatching"),  # "is not trainable"
        ("videomt", "VideomtForUniversalSegmentation"),  # mask/class labels refused on video
    ],
)
def test_an_inference_only_head_that_raises_valueerror_for_labels_gets_none(model_type, architecture):
    # such heads have no loss: given labels they raise ValueError, so they get none and the
    # backward stage runs its surrogate loss
    model, cfg, inputs = built(model_type, architecture)
    assert not {"labels", "mask_labels", "class_labels"} & set(inputs.kwargs) and not inputs.labels
    assert any("the forward refuses" in n for n in inputs.notes)
    runs(model, inputs)
