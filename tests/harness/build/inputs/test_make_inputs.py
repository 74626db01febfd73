"""make_inputs (harness.build.inputs): inputs that run the model and give its loss, deterministic per
seed, the prompt's marker tokens and separated pairs, aliases, inputs the forward refuses
together, decoder inputs, each input family on a real architecture, and the declared step list."""

from __future__ import annotations

import pytest
import torch

from harness.build.inputs import STEPS, Step, make_inputs, special_token_ids
from tests.harness.build.helpers import (
    built,
    forward_passes,
    model_of,
    passes,
    runs,
    trains,
)

# (model_type, class, {input: expected source prefix}, loss from labels?)
FAMILIES = [
    # decoder-LM sequence classification: a pad token id in the shrunk config
    ("llama", "LlamaForSequenceClassification", {"input_ids": "synthetic"}, True),
    ("gpt2", "GPT2ForSequenceClassification", {"input_ids": "synthetic"}, True),
    # time series
    (
        "time_series_transformer",
        "TimeSeriesTransformerForPrediction",
        {"past_values": "recipe:", "future_values": "recipe:"},
        True,
    ),
    ("patchtst", "PatchTSTForPrediction", {"past_values": "recipe:"}, True),
    ("patchtsmixer", "PatchTSMixerForRegression", {"target_values": "recipe:"}, True),
    # video
    (
        "videomae",
        "VideoMAEForVideoClassification",
        {"pixel_values": "processor:VideoMAEImageProcessor"},
        True,
    ),
    ("llava_next_video", "LlavaNextVideoForConditionalGeneration", {"pixel_values_videos": ""}, True),
    (
        "qwen3_5_moe",
        "Qwen3_5MoeModel",
        {
            "pixel_values": "processor:Qwen2VLImageProcessor",
            "input_ids": "synthetic+image_placeholders+video_placeholders",
        },
        False,
    ),
    # audio layouts
    (
        "whisper",
        "WhisperForConditionalGeneration",
        {"input_features": "processor:WhisperFeatureExtractor"},
        True,
    ),
    (
        "wav2vec2-bert",
        "Wav2Vec2BertForCTC",
        {"input_features": "processor:SeamlessM4TFeatureExtractor"},
        True,
    ),
    (
        "audio-spectrogram-transformer",
        "ASTForAudioClassification",
        {"input_values": "processor:ASTFeatureExtractor"},
        True,
    ),
    ("encodec", "EncodecModel", {"input_values": "processor:EncodecFeatureExtractor"}, False),
    ("clap", "ClapAudioModel", {"input_features": "processor:ClapFeatureExtractor"}, False),
    (
        "audioflamingo3",
        "AudioFlamingo3ForConditionalGeneration",
        {"input_features": "processor:WhisperFeatureExtractor"},
        True,
    ),
    # images with the processor's own layout
    (
        "llava_next",
        "LlavaNextForConditionalGeneration",
        {"image_sizes": "processor:LlavaNextImageProcessor"},
        True,
    ),
    ("oneformer", "OneFormerForUniversalSegmentation", {"task_inputs": "recipe:task_inputs"}, True),
    ("grounding-dino", "GroundingDinoForObjectDetection", {"input_ids": "recipe:grounding-dino"}, True),
    (
        "sam",
        "SamModel",
        {"input_points": "recipe:", "input_boxes": "recipe:", "pixel_values": "processor:SamImageProcessor"},
        False,
    ),
    ("vision-encoder-decoder", "VisionEncoderDecoderModel", {"decoder_input_ids": "synthetic"}, True),
    # a vision tower nested in the encoder (config.encoder.vision_config), image tokens pooled to the
    # shrunk patch grid, the feature method on the encoder
    (
        "t5gemma2",
        "T5Gemma2Model",
        {"pixel_values": "processor:Gemma3ImageProcessor", "input_ids": "synthetic+image_placeholders"},
        False,
    ),
    ("gemma3", "Gemma3ForConditionalGeneration", {"input_ids": "synthetic+image_placeholders"}, True),
    # patch-grid images in the merged channels-last layout (its processor needs torchvision)
    ("inkling2", "Inkling2ForConditionalGeneration", {"input_ids": "synthetic+image_placeholders"}, True),
    # encoder-decoder classification pools the decoder at the input's eos tokens
    ("bart", "BartForSequenceClassification", {"decoder_input_ids": "synthetic:shifted_input_ids"}, True),
    ("t5", "T5ForSequenceClassification", {"decoder_input_ids": "synthetic:shifted_input_ids"}, True),
    # detection / segmentation with their real labels
    ("detr", "DetrForObjectDetection", {"pixel_values": "processor:DetrImageProcessor"}, True),
    ("mask2former", "Mask2FormerForUniversalSegmentation", {"mask_labels": "synthetic"}, True),
    ("segformer", "SegformerForSemanticSegmentation", {"labels": "synthetic"}, True),
]


@pytest.mark.parametrize(
    "model_type,architecture,main_input,label_shape",
    [
        ("bert", "BertForMaskedLM", "input_ids", "tokens"),
        ("bert", "BertForSequenceClassification", "input_ids", "batch"),
        ("bert", "BertForTokenClassification", "input_ids", "tokens"),
        ("bert", "BertForMultipleChoice", "input_ids", "batch"),
        ("gpt2", "GPT2LMHeadModel", "input_ids", "tokens"),
        ("t5", "T5ForConditionalGeneration", "input_ids", "decoder"),
        ("vit", "ViTForImageClassification", "pixel_values", "batch"),
        ("whisper", "WhisperForConditionalGeneration", "input_features", "decoder"),
        ("wav2vec2", "Wav2Vec2ForCTC", "input_values", "ctc"),
        ("wav2vec2", "Wav2Vec2ForSequenceClassification", "input_values", "batch"),
    ],
)
def test_inputs_run_and_give_a_loss(model_type, architecture, main_input, label_shape):
    model, cfg = model_of(model_type, architecture)
    batch = make_inputs(model, cfg, architecture, seed=0)
    kw = batch.kwargs
    assert main_input in kw and batch.has_labels
    if "input_ids" in kw:
        vocab = cfg.get_text_config().vocab_size
        assert int(kw["input_ids"].max()) < vocab and int(kw["input_ids"].min()) >= 0
    if "attention_mask" in kw and kw["attention_mask"].dim() == 2 and "input_ids" in kw:
        assert kw["attention_mask"][1, -1] == 0 and kw["attention_mask"][0].all()  # padding present
    if main_input == "pixel_values":
        assert kw["pixel_values"].shape[1:] == (cfg.num_channels, cfg.image_size, cfg.image_size)
    if main_input == "input_features":
        assert kw["input_features"].shape[1:] == (cfg.num_mel_bins, 2 * cfg.max_source_positions)
    labels = kw.get("labels")
    if label_shape == "batch":
        assert labels.shape == (2,)
    elif label_shape == "decoder":
        assert labels.shape == kw["decoder_input_ids"].shape
    out = model(**kw)
    assert out.loss is not None and torch.isfinite(out.loss)


def test_inputs_are_deterministic_per_seed():
    model, cfg = model_of("bert", "BertForMaskedLM")
    a = make_inputs(model, cfg, "BertForMaskedLM", seed=3).kwargs
    b = make_inputs(model, cfg, "BertForMaskedLM", seed=3).kwargs
    c = make_inputs(model, cfg, "BertForMaskedLM", seed=4).kwargs
    assert torch.equal(a["input_ids"], b["input_ids"]) and not torch.equal(a["input_ids"], c["input_ids"])


def test_token_ids_avoid_special_and_placeholder_ids():
    model, cfg = model_of("llava", "LlavaForConditionalGeneration")
    batch = make_inputs(model, cfg, "LlavaForConditionalGeneration", seed=0)
    ids = batch.kwargs["input_ids"]
    image = cfg.image_token_id
    # placeholders: exactly as many as the vision tower produces features, nowhere else
    n_features = model.get_image_features(pixel_values=batch.kwargs["pixel_values"])
    n_features = n_features.pooler_output if hasattr(n_features, "pooler_output") else n_features
    per_image = sum(t.reshape(-1, t.shape[-1]).shape[0] for t in n_features) // 2
    assert int((ids == image).sum(dim=1)[0]) == per_image
    text = ids[:, per_image:]
    real = batch.kwargs["attention_mask"][:, per_image:].bool()
    specials = special_token_ids(cfg)
    assert not any(int(t) in specials for t in text[real])
    # padded positions carry the pad id, as a tokenizer's right padding does
    assert (text[~real] == cfg.get_text_config().pad_token_id).all() and (~real).any()
    out = model(**batch.kwargs)
    assert out.loss is not None and torch.isfinite(out.loss)


@pytest.mark.slow
@pytest.mark.parametrize("model_type,architecture,sources,labelled", FAMILIES, ids=[f[1] for f in FAMILIES])
def test_family_runs_with_production_layout(model_type, architecture, sources, labelled):
    metrics = passes(model_type, architecture)
    got = metrics["load"]["input_sources"]
    for name, prefix in sources.items():
        assert name in got and got[name].startswith(prefix), (name, got.get(name))
    assert metrics["backward"]["loss_source"] == ("labels" if labelled else "surrogate")
    assert metrics["backward"]["mode"] == "train"


def test_a_marker_token_the_config_names_is_in_every_prompt():
    # Splinter's pretraining head reads at each sample's [QUESTION] token and refuses a batch
    # without one; its loss takes span positions and the question positions
    model, cfg, inputs = built("splinter", "SplinterForPreTraining")
    assert ((inputs.kwargs["input_ids"] == cfg.question_token_id).sum(-1) == 1).all()
    assert inputs.sources["question_positions"] == "recipe:question_positions"
    assert {"start_positions", "end_positions"} <= set(inputs.labels)
    trains(model, inputs)


def test_the_qa_head_finds_its_question_token_itself():
    model, cfg, inputs = built("splinter", "SplinterForQuestionAnswering")
    assert "question_positions" not in inputs.kwargs
    assert ((inputs.kwargs["input_ids"] == cfg.question_token_id).sum(-1) == 1).all()
    trains(model, inputs)


def test_question_answering_and_multiple_choice_prompts_are_separated_pairs():
    # Longformer's QA and multiple-choice heads put global attention on the question they find
    # before exactly three separators (`<s> q </s></s> c </s>`) in every sample (and choice)
    for architecture, dims in (("LongformerForQuestionAnswering", 2), ("LongformerForMultipleChoice", 3)):
        model, cfg, inputs = built("longformer", architecture)
        ids = inputs.kwargs["input_ids"]
        assert ids.dim() == dims
        assert ((ids == cfg.sep_token_id).sum(-1) == 3).all()
        assert runs(model, inputs).loss is not None


def test_heads_that_read_no_pair_keep_their_synthetic_prompt():
    _, cfg, inputs = built("longformer", "LongformerForSequenceClassification")
    assert not (inputs.kwargs["input_ids"] == cfg.sep_token_id).any()


@pytest.mark.parametrize(
    "model_type, architecture, renamed",
    [
        # an audio tower naming its extractor's spectrogram and mask its own way (Gemma-3n)
        (
            "gemma3n_audio",
            "Gemma3nAudioEncoder",
            {"audio_mel": "input_features", "audio_mel_mask": "input_features_mask"},
        ),
        # a vision tower taking its processor's patch positions under its own name (Gemma-4)
        ("gemma4_vision", "Gemma4VisionModel", {"pixel_position_ids": "image_position_ids"}),
    ],
)
def test_a_towers_own_names_for_its_processors_outputs(model_type, architecture, renamed):
    model, cfg, inputs = built(model_type, architecture)
    for name in renamed:
        assert inputs.sources[name].startswith("processor:")
    trains(model, inputs)


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


def test_inputs_the_forward_refuses_together_are_not_both_given():
    # Molmo2 raises when images and videos come in one call: the videos are left out
    model, cfg, inputs = built("molmo2", "Molmo2Model")
    assert "pixel_values" in inputs.kwargs and "pixel_values_videos" not in inputs.kwargs
    assert any("pixel_values_videos" in n for n in inputs.notes)


@pytest.mark.slow  # SeamlessM4T's shrunk model (speech, text, t2u and vocoder towers): ~15 s
def test_speech_or_text_the_forward_says_are_exclusive_gets_the_speech_and_its_mask():
    # SeamlessM4T's forward takes speech or text under one attention mask and warns that
    # `input_features` and `input_ids` are mutually exclusive: the text's mask met the speech
    model, cfg, inputs = built("seamless_m4t", "SeamlessM4TModel")
    kw = inputs.kwargs
    assert "input_ids" not in kw and kw["attention_mask"].shape == kw["input_features"].shape[:2]
    with torch.no_grad():
        model(**kw)


def test_an_input_the_forward_takes_as_embeddings_excludes_token_ids():
    # Pop2Piano's forward sets `inputs_embeds = input_features`: given token ids too, its encoder
    # refused both; the features are as wide as the model
    model, cfg, inputs = built("pop2piano", "Pop2PianoForConditionalGeneration")
    kw = inputs.kwargs
    assert "input_ids" not in kw and kw["input_features"].shape[-1] == cfg.d_model
    with torch.no_grad():
        model(**kw)


def test_encoder_decoder_token_classification_labels_every_input_position_through_the_decoder():
    # T5Gemma's token-classification head scores the decoder's states: the decoder sees the
    # input shifted right, so there is one logit per labelled input position
    model, cfg, inputs = built("t5gemma", "T5GemmaForTokenClassification")
    kw = inputs.kwargs
    assert kw["decoder_input_ids"].shape == kw["input_ids"].shape == kw["labels"].shape
    assert inputs.sources["decoder_input_ids"] == "synthetic:shifted_input_ids"
    assert torch.isfinite(model(**kw).loss)


def test_the_steps_are_named_once_and_each_says_why_in_one_line():
    names = [step.name for step in STEPS]
    assert len(set(names)) == len(names)
    assert all(isinstance(step, Step) and callable(step.run) for step in STEPS)
    assert all(step.why.strip() and "\n" not in step.why for step in STEPS)


def test_steps_come_after_the_steps_whose_inputs_they_read():
    """The prompt is made first and labels last; media before the aliases that rename their
    outputs; placeholders once every pixel input is final; decoder ids once the prompt is."""
    order = {step.name: i for i, step in enumerate(STEPS)}
    assert order["text"] == 0 and list(order)[-2:] == ["label_checks", "labels"]
    for before, after in [
        ("images", "videos"),
        ("videos", "aliases"),
        ("audio", "aliases"),
        ("aliases", "recipes"),
        ("sessions", "recipes"),
        ("recipes", "docstring"),
        ("docstring", "exclusive"),
        ("exclusive", "placeholders"),
        ("unused", "placeholders"),
        ("placeholders", "decoder"),
    ]:
        assert order[before] < order[after], (before, after)


def test_make_inputs_runs_the_declared_steps_in_order(monkeypatch):
    import harness.build.inputs as inputs_module

    ran: list[str] = []

    def recorded(step: Step) -> Step:
        def run(build):
            ran.append(step.name)
            step.run(build)

        return Step(step.name, run, step.why)

    model, cfg = model_of("bert", "BertForSequenceClassification")
    expected = make_inputs(model, cfg, "BertForSequenceClassification", seed=0)
    monkeypatch.setattr(inputs_module, "STEPS", tuple(recorded(step) for step in STEPS))
    got = make_inputs(model, cfg, "BertForSequenceClassification", seed=0)
    assert ran == [step.name for step in STEPS]
    assert got.kwargs.keys() == expected.kwargs.keys() and got.labels == expected.labels == ["labels"]
    assert all(torch.equal(got.kwargs[k], expected.kwargs[k]) for k in ("input_ids", "labels"))
