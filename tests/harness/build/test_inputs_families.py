"""Each input family of issue 10 on a real architecture: the inputs have the production layout,
come from the source they should (the model's own processor, a recipe), and load, forward and
backward pass on cpu; heads with labels run their own loss."""

from __future__ import annotations

import pytest
import torch

from contracts.records import ModelSpec
from harness.build.inputs.expr import RecipeError, evaluate
from harness.build.models import build_model, resolve_config
from harness.stages.check import check_model
from tests.harness.build.shrink_helpers import built

STAGES = ["load", "forward", "backward"]


def passes(model_type: str, architecture: str) -> dict:
    result = check_model(
        ModelSpec(f"test/{model_type}", model_type, architecture), backend="cpu", stages=STAGES
    )
    bad = {s: r.reason for s, r in result.stages.items() if r.status.value != "pass"}
    assert not bad, bad
    return {s: r.metrics for s, r in result.stages.items()}


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


@pytest.mark.slow
@pytest.mark.parametrize("model_type,architecture,sources,labelled", FAMILIES, ids=[f[1] for f in FAMILIES])
def test_family_runs_with_production_layout(model_type, architecture, sources, labelled):
    metrics = passes(model_type, architecture)
    got = metrics["load"]["input_sources"]
    for name, prefix in sources.items():
        assert name in got and got[name].startswith(prefix), (name, got.get(name))
    assert metrics["backward"]["loss_source"] == ("labels" if labelled else "surrogate")
    assert metrics["backward"]["mode"] == "train"


def test_decoder_lm_classification_pads_with_the_pad_token():
    model, cfg, batch = built("llama", "LlamaForSequenceClassification")
    pad = cfg.pad_token_id
    assert pad is not None and 0 <= pad < cfg.vocab_size
    ids, mask = batch.kwargs["input_ids"], batch.kwargs["attention_mask"]
    assert (ids[mask == 0] == pad).all() and (mask == 0).any() and (ids[mask == 1] != pad).all()


def test_time_series_lengths_follow_the_config():
    _, cfg, batch = built("time_series_transformer", "TimeSeriesTransformerForPrediction")
    kw = batch.kwargs
    length = cfg.context_length + max(cfg.lags_sequence)
    assert kw["past_values"].shape == (2, length) and kw["past_observed_mask"].shape == (2, length)
    assert kw["past_time_features"].shape == (2, length, cfg.num_time_features)
    assert kw["future_values"].shape == (2, cfg.prediction_length) and "future_values" in batch.labels


def test_video_is_five_dimensional_with_the_configured_frames():
    _, cfg, batch = built("videomae", "VideoMAEForVideoClassification")
    pv = batch.kwargs["pixel_values"]
    assert pv.shape == (2, cfg.num_frames, cfg.num_channels, cfg.image_size, cfg.image_size)


def test_video_llm_prompt_has_one_placeholder_per_video_feature():
    model, cfg, batch = built("llava_next_video", "LlavaNextVideoForConditionalGeneration")
    kw = batch.kwargs
    feats = model.get_video_features(pixel_values_videos=kw["pixel_values_videos"])
    feats = feats.pooler_output if hasattr(feats, "pooler_output") else feats
    per_sample = (
        sum(
            t.reshape(-1, t.shape[-1]).shape[0]
            for t in (feats if isinstance(feats, (list, tuple)) else [feats])
        )
        // 2
    )
    assert int((kw["input_ids"][0] == cfg.video_token_id).sum()) == per_sample > 0


def test_whisper_features_have_the_encoder_length():
    _, cfg, batch = built("whisper", "WhisperForConditionalGeneration")
    assert batch.kwargs["input_features"].shape == (2, cfg.num_mel_bins, 2 * cfg.max_source_positions)


def test_sam_boxes_are_well_formed():
    _, cfg, batch = built("sam", "SamModel")
    boxes = batch.kwargs["input_boxes"]
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()
    assert boxes.max() <= cfg.vision_config.image_size


def test_detection_labels_are_normalized_boxes_per_image():
    _, cfg, batch = built("detr", "DetrForObjectDetection")
    targets = batch.kwargs["labels"]
    assert len(targets) == 2
    for t in targets:
        assert t["boxes"].shape[1] == 4 and ((t["boxes"] > 0) & (t["boxes"] <= 1)).all()
        assert (t["class_labels"] < cfg.num_labels).all()


def test_backward_in_train_mode_is_deterministic_and_reformer_trains():
    """Reformer refuses backward in eval mode; with dropout 0 two runs give the same loss."""
    a = passes("reformer", "ReformerForMaskedLM")["backward"]
    b = passes("reformer", "ReformerForMaskedLM")["backward"]
    assert a["mode"] == "train" and a["loss"] == b["loss"] and a["loss_source"] == "labels"


def test_dropout_is_zero_after_resolving():
    cfg = resolve_config(ModelSpec("test/bert", "bert", "BertForMaskedLM"))
    assert cfg.hidden_dropout_prob == 0.0 and cfg.attention_probs_dropout_prob == 0.0
    assert "bert.hidden_dropout_prob" in cfg._shrink_train_mode_changes
    model = build_model(cfg, "BertForMaskedLM")
    model.train()
    ids = torch.randint(5, 100, (2, 8))
    assert torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_recipe_formulas_are_safe():
    assert (
        evaluate("context_length + max(lags_sequence)", {"context_length": 8, "lags_sequence": [1, 7]}) == 15
    )
    with pytest.raises(RecipeError):
        evaluate("__import__('os')", {})
    with pytest.raises(RecipeError):
        evaluate("config.__class__", {"config": object()})
    with pytest.raises(NameError):
        evaluate("missing_field + 1", {})


def test_a_part_of_a_composite_model_is_fed_by_the_composites_processor():
    from harness.build.inputs.processors import composite_type, feature_extractor_class

    assert composite_type("qwen3_omni_moe_thinker") == "qwen3_omni_moe"
    assert composite_type("bert") is None
    assert feature_extractor_class("qwen3_omni_moe_thinker", {}).__name__ == "WhisperFeatureExtractor"


def test_image_tokens_fit_the_shrunk_patch_grid():
    cfg = resolve_config(ModelSpec("test/gemma3", "gemma3", "Gemma3Model"))
    patches = (cfg.vision_config.image_size // cfg.vision_config.patch_size) ** 2
    assert cfg.mm_tokens_per_image <= patches
