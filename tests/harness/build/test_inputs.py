"""Inputs are valid for the model (the forward runs, a loss exists) and deterministic per seed."""

from __future__ import annotations

import pytest
import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs, special_token_ids
from harness.build.models import build_model, resolve_config


def built(model_type: str, architecture: str):
    cfg = resolve_config(ModelSpec(f"test/{model_type}", model_type, architecture))
    return build_model(cfg, architecture, seed=0), cfg


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
    model, cfg = built(model_type, architecture)
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
    model, cfg = built("bert", "BertForMaskedLM")
    a = make_inputs(model, cfg, "BertForMaskedLM", seed=3).kwargs
    b = make_inputs(model, cfg, "BertForMaskedLM", seed=3).kwargs
    c = make_inputs(model, cfg, "BertForMaskedLM", seed=4).kwargs
    assert torch.equal(a["input_ids"], b["input_ids"]) and not torch.equal(a["input_ids"], c["input_ids"])


def test_token_ids_avoid_special_and_placeholder_ids():
    model, cfg = built("llava", "LlavaForConditionalGeneration")
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


def test_qwen2_vl_grid_and_placeholders():
    model, cfg = built("qwen2_vl", "Qwen2VLForConditionalGeneration")
    batch = make_inputs(model, cfg, "Qwen2VLForConditionalGeneration", seed=0)
    kw = batch.kwargs
    merge = cfg.vision_config.spatial_merge_size
    t, h, w = kw["image_grid_thw"][0].tolist()
    assert int((kw["input_ids"][0] == cfg.image_token_id).sum()) == t * h * w // merge**2
    out = model(**kw)
    assert torch.isfinite(out.loss)


def test_surrogate_when_the_head_has_no_labels():
    model, cfg = built("bert", "BertModel")
    batch = make_inputs(model, cfg, "BertModel", seed=0)
    assert not batch.has_labels and "labels" not in batch.kwargs
