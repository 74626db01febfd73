"""Input-synthesis gaps closed by class (issue 10), each on a real architecture: placeholder token
ids a config leaves null, modalities a config has no tower for, placeholders the model's own check
rejects, inputs a forward (or a feature method) requires, table/region/language inputs, layout
models' 2-D embedding widths. Each asserts the promised input and that forward passes on cpu."""

from __future__ import annotations

import pytest
import torch

from contracts.records import ModelSpec
from harness.stages.check import check_model
from tests.harness.build.shrink_helpers import built


def forward_passes(model_type: str, architecture: str, stages=("load", "forward")) -> dict:
    result = check_model(
        ModelSpec(f"test/{model_type}", model_type, architecture), backend="cpu", stages=list(stages)
    )
    bad = {s: r.reason for s, r in result.stages.items() if r.status.value != "pass"}
    assert not bad, bad
    return result.stages["load"].metrics


def test_a_null_placeholder_token_id_gets_a_free_id_and_the_processors_count():
    # BLIP-2's default config defines image_token_id but leaves it None; its processor inserts
    # num_query_tokens image tokens per image
    model, cfg, inputs = built("blip-2", "Blip2Model")
    assert isinstance(cfg.image_token_id, int) and 0 <= cfg.image_token_id < cfg.text_config.vocab_size
    ids = inputs.kwargs["input_ids"]
    assert ((ids == cfg.image_token_id).sum(-1) == cfg.num_query_tokens).all()
    metrics = forward_passes("blip-2", "Blip2Model")
    assert any(c.endswith((".image_token_id", ".image_token_index")) for c in metrics["train_mode_changes"])


@pytest.mark.slow  # VibeVoice's shrunk model is over the 5M budget: ~30 s
def test_audio_placeholders_for_a_waveform_model():
    # VibeVoice takes `input_values` (not input_features): its prompt gets audio placeholders
    model, cfg, inputs = built("vibevoice", "VibeVoiceForConditionalGeneration")
    n = int((inputs.kwargs["input_ids"] == cfg.audio_token_id).sum())
    assert n > 0 and "input_values" in inputs.kwargs
    with torch.no_grad():
        model(**inputs.kwargs)


def test_no_inputs_for_a_modality_whose_sub_config_is_null():
    # Gemma-4's default config has vision_config = audio_config = None: no towers are built
    model, cfg, inputs = built("gemma4", "Gemma4ForConditionalGeneration")
    assert cfg.vision_config is None and cfg.audio_config is None
    assert not {"pixel_values", "pixel_values_videos", "input_features"} & set(inputs.kwargs)
    with torch.no_grad():
        model(**inputs.kwargs)


def test_a_modality_the_models_placeholder_check_rejects_is_left_out():
    # GLM-4.1V counts video frames by the image token: images and videos in one prompt never
    # match, so the prompt keeps the images (the model's own get_placeholder_mask says so)
    model, cfg, inputs = built("glm4v", "Glm4vForConditionalGeneration")
    assert "pixel_values" in inputs.kwargs and "pixel_values_videos" not in inputs.kwargs
    assert "video_grid_thw" not in inputs.kwargs and "image_grid_thw" in inputs.kwargs
    assert any(n.startswith("no video input") for n in inputs.notes)
    forward_passes("glm4v", "Glm4vForConditionalGeneration")


@pytest.mark.parametrize(
    "model_type, architecture, made",
    [
        # a vision tower's grid (and merge sizes) from the processor, renamed to the tower's names
        ("qwen3_vl_vision", "Qwen3VLVisionModel", {"hidden_states": "processor:", "grid_thw": "processor:"}),
        (
            "video_llama_3_vision",
            "VideoLlama3VisionModel",
            {"grid_thw": "processor:", "merge_sizes": "processor:"},
        ),
        # a required inputs_embeds (a forward with no token ids)
        (
            "nemotron3_5_transcribe_word_timestamp",
            "Nemotron3_5TranscribeWordTimestampModel",
            {"inputs_embeds": "recipe:"},
        ),
        # the feature mask a feature extractor would give, with stacked low-frame-rate features
        (
            "fun_asr_nano_encoder",
            "FunAsrNanoEncoder",
            {"input_features": "", "input_features_mask": "synthetic"},
        ),
        # a codec encoder's (batch, channels, samples) waveform
        (
            "pocket_tts_audio_tokenizer_encoder",
            "PocketTTSAudioTokenizerEncoderModel",
            {"input_values": "synthetic"},
        ),
        # table token types, detector regions, language ids, marked positions (recipes)
        ("tapas", "TapasForQuestionAnswering", {"token_type_ids": "recipe:token_type_ids"}),
        ("lxmert", "LxmertModel", {"visual_feats": "recipe:", "visual_pos": "recipe:"}),
        ("xmod", "XmodForSequenceClassification", {"lang_ids": "recipe:lang_ids"}),
        ("jev", "JevForDecision", {"marks": "recipe:jev.", "question_type_ids": "recipe:jev."}),
        # layout models: 2-D position embeddings concatenated to the shrunk width
        (
            "layoutlmv3",
            "LayoutLMv3ForSequenceClassification",
            {"bbox": "recipe:bbox", "pixel_values": "processor:"},
        ),
        ("lilt", "LiltForSequenceClassification", {"bbox": "recipe:bbox"}),
        ("bros", "BrosForTokenClassification", {"bbox": "recipe:bbox"}),
    ],
)
def test_required_inputs_are_made(model_type, architecture, made):
    sources = forward_passes(model_type, architecture)["input_sources"]
    for name, prefix in made.items():
        assert name in sources and sources[name].startswith(prefix), (name, sources)


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


def test_video_patches_have_the_width_of_the_processors_image_patches():
    # HY-V4-VL's tower embeds image and video patches alike (no temporal patch in its config)
    model, cfg, inputs = built("hy_v4_vl", "HYV4VLForConditionalGeneration")
    assert inputs.kwargs["pixel_values_videos"].shape[-1] == inputs.kwargs["pixel_values"].shape[-1]


def test_text_to_speech_labels_are_mel_frames():
    # SpeechT5's TTS head is trained on the target spectrogram, shifted into its speech decoder
    model, cfg, inputs = built("speecht5", "SpeechT5ForTextToSpeech")
    labels = inputs.kwargs["labels"]
    assert labels.is_floating_point() and labels.shape[-1] == cfg.num_mel_bins
    assert labels.shape[1] % cfg.reduction_factor == 0
    out = model(**inputs.kwargs)
    assert out.loss is not None and torch.isfinite(out.loss)


def test_a_config_with_two_text_configs_gets_inputs_per_codebook():
    # MusicGen has a text encoder and a decoder: `get_text_config()` is ambiguous (the input maker
    # raised); the text input's is the one, and the decoder's codes are one row per codebook
    from harness.build.inputs.base import text_config

    model, cfg, inputs = built("musicgen", "MusicgenForConditionalGeneration")
    assert text_config(cfg) is cfg.text_encoder
    books = cfg.decoder.num_codebooks
    assert inputs.kwargs["decoder_input_ids"].shape[0] == 2 * books
    assert inputs.kwargs["labels"].shape[-1] == books
    out = model(**inputs.kwargs)
    assert out.loss is not None and torch.isfinite(out.loss)


def test_streaming_audio_has_one_text_position_per_audio_token():
    # Voxtral Realtime adds an audio embedding to every text position: the mel frames are
    # `audio_length_per_tok` per text token (the extractor's length gave 3 audio tokens for 16)
    model, cfg, inputs = built("voxtral_realtime", "VoxtralRealtimeModel")
    ids, feats = inputs.kwargs["input_ids"], inputs.kwargs["input_features"]
    assert feats.shape[-1] == cfg.audio_length_per_tok * ids.shape[1]
    with torch.no_grad():
        model(**inputs.kwargs)


@pytest.mark.slow  # SeamlessM4T's shrunk model (speech, text, t2u and vocoder towers): ~15 s
def test_speech_or_text_the_forward_says_are_exclusive_gets_the_speech_and_its_mask():
    # SeamlessM4T's forward takes speech or text under one attention mask and warns that
    # `input_features` and `input_ids` are mutually exclusive: the text's mask met the speech
    model, cfg, inputs = built("seamless_m4t", "SeamlessM4TModel")
    kw = inputs.kwargs
    assert "input_ids" not in kw and kw["attention_mask"].shape == kw["input_features"].shape[:2]
    with torch.no_grad():
        model(**kw)


def test_a_codec_half_called_on_hidden_states_gets_its_latents():
    # VibeVoice's tokenizer decoder takes an undocumented `hidden_states`: latents of
    # `hidden_size` (the forward was called without it; its encoder gets a waveform of `channels`)
    model, cfg, inputs = built(
        "vibevoice_acoustic_tokenizer_decoder", "VibeVoiceAcousticTokenizerDecoderModel"
    )
    assert inputs.kwargs["hidden_states"].shape[1] == cfg.hidden_size
    with torch.no_grad():
        model(**inputs.kwargs)


def test_an_input_the_forward_takes_as_embeddings_excludes_token_ids():
    # Pop2Piano's forward sets `inputs_embeds = input_features`: given token ids too, its encoder
    # refused both; the features are as wide as the model
    model, cfg, inputs = built("pop2piano", "Pop2PianoForConditionalGeneration")
    kw = inputs.kwargs
    assert "input_ids" not in kw and kw["input_features"].shape[-1] == cfg.d_model
    with torch.no_grad():
        model(**kw)
