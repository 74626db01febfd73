"""Hand recipes (harness.build.inputs.recipes, input_recipes.yaml): time series, prompts, codebooks,
regions, policies and the layouts of processors that cannot run here, each on a real
architecture; a recipe naming a field the config lacks does not apply."""

from __future__ import annotations

import pytest
import torch

from harness.build.inputs.base import ConfigScope
from tests.harness.build.helpers import (
    built,
    runs,
    trains,
)


def test_time_series_lengths_follow_the_config():
    _, cfg, batch = built("time_series_transformer", "TimeSeriesTransformerForPrediction")
    kw = batch.kwargs
    length = cfg.context_length + max(cfg.lags_sequence)
    assert kw["past_values"].shape == (2, length) and kw["past_observed_mask"].shape == (2, length)
    assert kw["past_time_features"].shape == (2, length, cfg.num_time_features)
    assert kw["future_values"].shape == (2, cfg.prediction_length) and "future_values" in batch.labels


def test_sam_boxes_are_well_formed():
    _, cfg, batch = built("sam", "SamModel")
    boxes = batch.kwargs["input_boxes"]
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()
    assert boxes.max() <= cfg.vision_config.image_size


def test_a_multiple_choice_head_gets_one_language_it_repeats_per_choice():
    model, cfg, inputs = built("xmod", "XmodForMultipleChoice")
    assert inputs.kwargs["lang_ids"].shape == (1,)
    trains(model, inputs)


def test_a_recipe_whose_fill_names_a_field_the_config_lacks_does_not_apply():
    """X-MOD's `lang_ids` recipe draws below `len(languages)`; FastSpeech2-Conformer also takes
    `lang_ids` but has no `languages`: the recipe does not apply there."""
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


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("granite_speech5_ctc", "GraniteSpeech5ForCTC"),
        ("granite_speech5_encoder", "GraniteSpeech5Encoder"),
    ],
)
def test_a_type_recipe_stands_in_for_an_extractor_that_needs_torchaudio(model_type, architecture):
    model, cfg, inputs = built(model_type, architecture)
    assert inputs.sources["input_features"] == f"recipe:{model_type}.input_features"
    mel = (getattr(cfg, "encoder_config", None) or cfg).num_mel_bins
    assert inputs.kwargs["input_features"].shape[-1] == 4 * mel
    trains(model, inputs)


def test_a_bare_model_without_pre_nets_gets_hidden_states():
    # SpeechT5's bare model has neither the speech nor the text pre-net: its encoder and decoder
    # take hidden states (a type recipe), while its speech-to-text head gets the waveform its
    # feature extractor makes (feature_size 1: samples, not the TTS mel bins)
    model, cfg, inputs = built("speecht5", "SpeechT5Model")
    assert inputs.kwargs["input_values"].shape[-1] == cfg.hidden_size
    assert inputs.kwargs["decoder_input_values"].shape[-1] == cfg.hidden_size
    trains(model, inputs)
    model, cfg, inputs = built("speecht5", "SpeechT5ForSpeechToText")
    assert inputs.sources["input_values"] == "processor:SpeechT5FeatureExtractor"
    assert inputs.kwargs["input_values"].dim() == 2
    trains(model, inputs)


def test_multi_codebook_decoder_ids_and_their_labels():
    # Dia: a text encoder with its own small vocab, a decoder over parallel audio codebooks
    # (batch, length, channels); its loss takes one row per (sample, channel)
    model, cfg, inputs = built("dia", "DiaForConditionalGeneration")
    dec, enc = cfg.decoder_config, cfg.encoder_config
    ids, codes, labels = (inputs.kwargs[k] for k in ("input_ids", "decoder_input_ids", "labels"))
    assert int(ids.max()) < enc.vocab_size
    assert codes.shape[-1] == dec.num_channels and int(codes.max()) < dec.vocab_size
    assert labels.shape == (codes.shape[0] * dec.num_channels, codes.shape[1])
    assert inputs.labels == ["labels"]
    trains(model, inputs)


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("fastspeech2_conformer", "FastSpeech2ConformerModel"),
        # a wrapper config: the token vocab is its model_config's
        ("fastspeech2_conformer_with_hifigan", "FastSpeech2ConformerWithHifiGan"),
    ],
)
def test_a_tts_model_trains_on_aligned_duration_spectrogram_pitch_energy(model_type, architecture):
    model, cfg, inputs = built(model_type, architecture)
    kw = inputs.kwargs
    assert set(inputs.labels) == {"duration_labels", "spectrogram_labels", "pitch_labels", "energy_labels"}
    assert (kw["duration_labels"].sum(-1) == kw["spectrogram_labels"].shape[1]).all()
    vocab = getattr(cfg, "model_config", cfg).vocab_size
    assert int(kw["input_ids"].max()) < vocab
    assert torch.isfinite(trains(model, inputs))


def test_token_ids_with_a_code_per_audio_codebook():
    # Kyutai STT: each position holds its text token and one code per audio codebook
    model, cfg, inputs = built("kyutai_speech_to_text", "KyutaiSpeechToTextForConditionalGeneration")
    ids = inputs.kwargs["input_ids"]
    assert ids.shape[-1] == 1 + cfg.num_codebooks and int(ids.max()) < min(
        cfg.vocab_size, cfg.codebook_vocab_size
    )
    assert inputs.kwargs["attention_mask"].shape == ids.shape[:2]
    assert inputs.kwargs["labels"].shape == ids.shape[:2]
    trains(model, inputs)


@pytest.mark.parametrize(
    "model_type, architecture",
    [
        ("gradium_phonon_tts", "GradiumPhononTTSForConditionalGeneration"),
        ("pocket_tts", "PocketTTSForConditionalGeneration"),
    ],
)
def test_tts_latent_labels_with_their_audio_positions(model_type, architecture):
    # Gradium Phonon TTS, Pocket TTS: the prompt holds the audio BOS and one latent position per
    # target frame
    model, cfg, inputs = built(model_type, architecture)
    ids, labels = inputs.kwargs["input_ids"], inputs.kwargs["labels"]
    assert ((ids == cfg.audio_latent_token_id).sum(-1) == labels.shape[1]).all()
    assert labels.shape[-1] == cfg.latent_dim
    trains(model, inputs)


def test_images_per_sample_and_their_text_attention():
    model, cfg, inputs = built("idefics", "IdeficsForVisionText2Text")
    assert inputs.kwargs["pixel_values"].dim() == 5
    assert inputs.kwargs["image_attention_mask"].shape == (*inputs.kwargs["input_ids"].shape, 1)
    trains(model, inputs)


def test_image_feature_positions_marked_by_a_mask():
    # Kosmos-2's prompt keeps latent_query_num positions for the image features, marked by a mask
    model, cfg, inputs = built("kosmos-2", "Kosmos2ForConditionalGeneration")
    mask = inputs.kwargs["image_embeds_position_mask"]
    assert mask.shape == inputs.kwargs["input_ids"].shape and (mask.sum(-1) == cfg.latent_query_num).all()
    trains(model, inputs)


def test_segmentation_labels_are_the_input_images_mask():
    # the shrinker does not map `intermediate_hidden_state_indices` into the shrunk stack: the
    # test sets what the shrunk two-layer encoder's values would be
    model, cfg, inputs = built(
        "seggpt", "SegGptForImageSegmentation", merge_index=0, intermediate_hidden_state_indices=[0, 1]
    )
    assert inputs.labels == ["labels"]
    assert inputs.kwargs["labels"].shape == inputs.kwargs["prompt_masks"].shape
    trains(model, inputs)


def test_table_token_types_stay_below_each_axis_vocab():
    model, cfg, inputs = built("tapas", "TapasForQuestionAnswering")
    types = inputs.kwargs["token_type_ids"]
    assert types.shape[-1] == len(cfg.type_vocab_sizes)
    assert (types < torch.tensor(cfg.type_vocab_sizes)).all() and (types >= 0).all()


def test_masked_patches_are_as_many_in_every_sample():
    # VideoMAE gathers the unmasked patches per sample into one tensor: equal counts or no forward
    model, cfg, inputs = built("videomae", "VideoMAEForPreTraining")
    counts = inputs.kwargs["bool_masked_pos"].sum(-1)
    assert (counts == counts[0]).all() and 0 < int(counts[0]) < inputs.kwargs["bool_masked_pos"].shape[-1]
    with torch.no_grad():
        model(**inputs.kwargs)


def test_streaming_audio_has_one_text_position_per_audio_token():
    # Voxtral Realtime adds an audio embedding to every text position: the mel frames are
    # `audio_length_per_tok` per text token (the extractor's length gave 3 audio tokens for 16)
    model, cfg, inputs = built("voxtral_realtime", "VoxtralRealtimeModel")
    ids, feats = inputs.kwargs["input_ids"], inputs.kwargs["input_features"]
    assert feats.shape[-1] == cfg.audio_length_per_tok * ids.shape[1]
    with torch.no_grad():
        model(**inputs.kwargs)


def test_a_codec_half_called_on_hidden_states_gets_its_latents():
    # VibeVoice's tokenizer decoder takes an undocumented `hidden_states`: latents of
    # `hidden_size` (its encoder gets a waveform of `channels`)
    model, cfg, inputs = built(
        "vibevoice_acoustic_tokenizer_decoder", "VibeVoiceAcousticTokenizerDecoderModel"
    )
    assert inputs.kwargs["hidden_states"].shape[1] == cfg.hidden_size
    with torch.no_grad():
        model(**inputs.kwargs)


def test_a_sibling_type_gets_the_recipe_of_the_image_processor_it_shares():
    # PI0.5 is fed by PI0's image processor: camera images stacked per sample with their mask,
    # one image token per patch in the prompt (a `by_image_processor` recipe)
    model, cfg, inputs = built("pi05", "PI05ForConditionalGeneration")
    kw = inputs.kwargs
    assert inputs.sources["pixel_values"] == "recipe:PI0ImageProcessor.pixel_values"
    assert kw["pixel_values"].dim() == 5 and kw["pixel_attention_mask"].dtype == torch.bool
    vision = cfg.vlm_config.vision_config
    assert (
        (kw["input_ids"] == cfg.vlm_config.image_token_id).sum(-1)
        == (vision.image_size // vision.patch_size) ** 2
    ).all()
    out = model(**kw)
    assert out.loss is not None and torch.isfinite(out.loss)


def test_a_model_without_an_input_preprocessor_gets_model_wide_inputs():
    # the bare Perceiver cross-attends to (batch, positions, d_model) of anything
    model, cfg, inputs = built("perceiver", "PerceiverModel")
    assert inputs.sources["inputs"] == "recipe:inputs"
    assert inputs.kwargs["inputs"].shape[-1] == cfg.d_model
    runs(model, inputs)


def test_a_decoder_of_fixed_length_gets_text_of_that_length():
    # Perceiver's masked-LM decoder queries max_position_embeddings positions: the text (and so
    # the labels) are that long, and its own loss runs
    model, cfg, inputs = built("perceiver", "PerceiverForMaskedLM")
    assert (
        inputs.kwargs["input_ids"].shape == (2, cfg.max_position_embeddings) == inputs.kwargs["labels"].shape
    )
    assert torch.isfinite(runs(model, inputs).loss)


def test_processors_that_cut_flattened_patches_get_them_with_one_placeholder_each():
    # Fuyu's (batch, patches, patch * patch * channels) and NeoMME's stacked (patches, 3 * p * p):
    # the width the patch embedding projects, one image token per patch in every prompt
    for model_type, architecture, width in (
        ("fuyu", "FuyuForCausalLM", lambda c: c.patch_size**2 * c.num_channels),
        ("neomme", "NeoMMEForMaskedLM", lambda c: 3 * c.patch_size**2),
    ):
        model, cfg, inputs = built(model_type, architecture)
        pv = inputs.kwargs["pixel_values"]
        assert inputs.sources["pixel_values"].startswith("recipe:") and pv.shape[-1] == width(cfg)
        patches = pv.shape[:-1].numel() // 2
        assert ((inputs.kwargs["input_ids"] == cfg.image_token_id).sum(-1) == patches).all()
        assert torch.isfinite(runs(model, inputs).loss)


def test_a_text_and_region_pretraining_head_gets_regions_and_labels_over_both():
    # VisualBERT's pretraining labels span text + detector regions, with the text/image match label
    model, cfg, inputs = built("visual_bert", "VisualBertForPreTraining")
    kw = inputs.kwargs
    assert kw["visual_embeds"].shape[-1] == cfg.visual_embedding_dim
    assert kw["labels"].shape[-1] == kw["input_ids"].shape[-1] + kw["visual_embeds"].shape[1]
    assert set(inputs.labels) == {"labels", "sentence_image_labels"}
    assert torch.isfinite(runs(model, inputs).loss)


def test_an_input_the_forward_hands_on_through_kwargs_is_made_for_it():
    # the bare PI0.5 passes the time embedding to its action expert in **kwargs (not in its
    # signature); its action chunk has no state token (PI0.5's state is text in the prompt)
    model, cfg, inputs = built("pi05", "PI05Model")
    kw = inputs.kwargs
    assert inputs.sources["timestep_embeds"] == "recipe:pi05.timestep_embeds"
    assert tuple(kw["timestep_embeds"].shape) == (2, cfg.dit_config.hidden_size)
    assert kw["action_embeds"].shape[1] == cfg.chunk_size
    runs(model, inputs)
    # PI0 (no such recipe: its head does not embed time that way) never gets it
    _, pi0_cfg, pi0 = built("pi0", "PI0Model")
    assert (
        "timestep_embeds" not in pi0.kwargs and pi0.kwargs["action_embeds"].shape[1] == pi0_cfg.chunk_size + 1
    )


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


def test_a_pooled_patch_layout_only_its_torchvision_processor_makes_comes_from_its_recipe():
    # Molmo2's image processor (torchvision) cuts images into flattened patches and says which
    # patches each token pools (`image_token_pooling`) and each image's token grid (`image_grids`)
    model, cfg, inputs = built("molmo2", "Molmo2Model")
    kw = inputs.kwargs
    vision = cfg.vision_config
    assert inputs.sources["image_token_pooling"].startswith("recipe:")
    assert kw["pixel_values"].shape[-1] == vision.patch_size**2 * vision.num_channels
    assert int(kw["image_token_pooling"].max()) < kw["pixel_values"].shape[1]
    tokens = int((kw["image_grids"][:, 0] * kw["image_grids"][:, 1]).sum())
    assert tokens == kw["image_token_pooling"].shape[0] == int((kw["input_ids"] == cfg.image_token_id).sum())
    runs(model, inputs)
