"""Input-synthesis gaps closed by class (issue 10, second round), each on a real architecture:
processors that pack their own pixels (a per-image grid output), video-only types, wrapper
models fed like the model they wrap, required inputs shaped by the forward's docstring, heads
whose forward refuses labels. Each asserts the promised input and that forward passes on cpu."""

from __future__ import annotations

import pytest
import torch

from harness.build.inputs.docshapes import documented_shapes
from tests.harness.build.shrink_helpers import built, runs


@pytest.mark.slow  # MiniCPM-V 4.6 builds in ~25 s under load
def test_a_processor_reporting_per_image_grids_keeps_its_packed_pixels():
    # MiniCPM-V 4.6's processor packs every image's patches into one row and says each image's
    # patch grid in `target_sizes`: its pixels are not the config's image size, and are right
    model, cfg, inputs = built("minicpmv4_6", "MiniCPMV4_6Model")
    assert inputs.sources["pixel_values"].startswith("processor:")
    assert inputs.sources["target_sizes"] == inputs.sources["pixel_values"]
    assert ((inputs.kwargs["input_ids"] == cfg.image_token_id).sum(-1) > 0).all()
    runs(model, inputs)


def test_a_type_mapped_only_to_a_video_processor_gets_videos():
    # InstructBLIP-Video's config names no frame count; transformers maps it a video processor
    # and no image processor, so its pixel_values are (batch, frames, channels, height, width)
    model, cfg, inputs = built("instructblipvideo", "InstructBlipVideoModel")
    assert inputs.kwargs["pixel_values"].dim() == 5
    runs(model, inputs)


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("colpali", "ColPaliForRetrieval"),  # PaliGemma inside: SigLIP processor, 16 tokens
        ("colmodernvbert", "ColModernVBertForRetrieval"),  # maps no processor: its ModernVBERT's
    ],
)
def test_a_wrapper_model_is_fed_like_the_model_it_wraps(model_type, architecture):
    model, cfg, inputs = built(model_type, architecture)
    assert inputs.sources["pixel_values"].startswith("processor:")
    token = cfg.vlm_config.image_token_id
    assert ((inputs.kwargs["input_ids"] == token).sum(-1) > 0).all()
    runs(model, inputs)


def test_colqwen2_patches_are_padded_per_image():
    model, cfg, inputs = built("colqwen2", "ColQwen2ForRetrieval")
    pv, grid = inputs.kwargs["pixel_values"], inputs.kwargs["image_grid_thw"]
    assert pv.dim() == 3 and pv.shape[0] == grid.shape[0] and pv.shape[1] == int(grid.prod(-1).max())
    runs(model, inputs)


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


def test_inputs_the_forward_refuses_together_are_not_both_given():
    # Molmo2 raises when images and videos come in one call: the videos are left out
    model, cfg, inputs = built("molmo2", "Molmo2Model")
    assert "pixel_values" in inputs.kwargs and "pixel_values_videos" not in inputs.kwargs
    assert any("pixel_values_videos" in n for n in inputs.notes)


def test_a_feature_method_that_needs_the_placeholders_gets_its_own_count():
    # MusicFlamingo's get_audio_features reads the audio placeholders from input_ids; its own
    # mismatch error says how many features it has, and the prompt then holds that many
    model, cfg, inputs = built("musicflamingo", "MusicFlamingoModel")
    n = (inputs.kwargs["input_ids"] == cfg.audio_token_id).sum(-1)
    assert (n > 0).all() and (n == n[0]).all()
    runs(model, inputs)


def test_a_forward_taking_its_processors_own_layout_gets_it():
    # Pix2Struct takes no pixel_values: its image processor's first model input is the
    # flattened patches (row id, column id, pixels) with their mask; the decoder gets ids
    model, cfg, inputs = built("pix2struct", "Pix2StructForConditionalGeneration")
    patches = inputs.kwargs["flattened_patches"]
    assert inputs.sources["flattened_patches"].startswith("processor:Pix2Struct")
    assert patches.shape[-1] == 2 + cfg.vision_config.patch_embed_hidden_size
    assert inputs.kwargs["attention_mask"].shape == patches.shape[:2]
    assert "decoder_input_ids" in inputs.kwargs and inputs.labels == ["labels"]
    runs(model, inputs)


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


def test_a_vision_language_action_policy_gets_state_actions_and_camera_images():
    # PI0: the robot state, the action chunk its flow-matching loss regresses on, camera images
    # stacked per sample with their mask, and one image token per patch in the prompt
    model, cfg, inputs = built("pi0", "PI0ForConditionalGeneration")
    kw = inputs.kwargs
    assert tuple(kw["state"].shape) == (2, cfg.max_state_dim)
    assert tuple(kw["actions"].shape) == (2, cfg.chunk_size, cfg.max_action_dim) and inputs.labels == [
        "actions"
    ]
    assert kw["pixel_values"].dim() == 5 and kw["pixel_attention_mask"].dtype == torch.bool
    vision = cfg.vlm_config.vision_config
    per_image = (vision.image_size // vision.patch_size) ** 2
    assert ((kw["input_ids"] == cfg.vlm_config.image_token_id).sum(-1) == per_image).all()
    out = model(**kw)
    assert out.loss is not None and torch.isfinite(out.loss)


def test_encoder_decoder_token_classification_labels_every_input_position_through_the_decoder():
    # T5Gemma's token-classification head scores the decoder's states: the decoder sees the
    # input shifted right, so there is one logit per labelled input position
    model, cfg, inputs = built("t5gemma", "T5GemmaForTokenClassification")
    kw = inputs.kwargs
    assert kw["decoder_input_ids"].shape == kw["input_ids"].shape == kw["labels"].shape
    assert inputs.sources["decoder_input_ids"] == "synthetic:shifted_input_ids"
    assert torch.isfinite(model(**kw).loss)
