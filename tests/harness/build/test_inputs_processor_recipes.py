"""Input layouts keyed by what feeds the model, not by one model type (issue 10): every type an
image processor feeds takes that processor's layout, its special tokens and separators are
where the head looks for them. Each on a real architecture, forward on cpu."""

from __future__ import annotations

import torch

from harness.build.inputs.recipes import image_processor_name
from tests.harness.build.shrink_helpers import built, runs


def test_a_vision_tower_takes_the_patch_layout_of_the_processor_feeding_its_composite():
    # Inkling-2's stand-alone vision tower is fed by Inkling2ImageProcessor (torchvision only):
    # one (patch * merge, patch * merge, channels) block per merged token, as the composite gets
    assert image_processor_name("inkling2_vision") == "Inkling2ImageProcessor"
    model, cfg, inputs = built("inkling2_vision", "Inkling2VisionModel")
    pv, grid = inputs.kwargs["pixel_values"], inputs.kwargs["image_grid_thw"]
    side = cfg.patch_size * cfg.spatial_merge_size
    assert tuple(pv.shape[1:]) == (side, side, cfg.num_channels)
    assert pv.shape[0] == int(grid.prod(-1).sum())
    runs(model, inputs)


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
