"""The shrinker (harness.build.shrink): a tiny config with the same architecture (heads, widths,
rope, overrides, cross-config ties, required fields) at the strongest level the model accepts."""

from __future__ import annotations

import json

import pytest
import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import build_model, count_parameters_meta, resolve_config
from harness.build.shrink import shrink_config, shrink_dict
from tests.harness.build.helpers import (
    BUDGET,
    forward,
    shrunk,
)


def test_gqa_ratio_and_size_llama():
    cfg = shrunk(
        "llama",
        "LlamaForCausalLM",
        num_attention_heads=32,
        num_key_value_heads=8,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        vocab_size=128256,
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
    )
    assert cfg.num_attention_heads // cfg.num_key_value_heads == 4
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0
    assert cfg.num_hidden_layers == 2 and cfg.hidden_size < 4096 and cfg.vocab_size <= 1024
    assert cfg.rope_parameters["rope_type"] == "llama3" and cfg.rope_parameters["factor"] == 8.0


def test_mha_stays_mha_and_mqa_stays_mqa():
    mha = shrunk("llama", num_attention_heads=16, num_key_value_heads=16)
    assert mha.num_attention_heads == mha.num_key_value_heads
    mqa = shrunk("falcon", num_attention_heads=71, new_decoder_architecture=False, multi_query=True)
    assert mqa.multi_query is True


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_encoder_decoder(model_type):
    cfg = shrunk(model_type)
    assert cfg.is_encoder_decoder
    layers = [
        getattr(cfg, f)
        for f in ("num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")
        if hasattr(cfg, f)
    ]
    assert layers and all(1 <= n <= 2 for n in layers)


def test_multimodal_subconfigs_shrink_and_token_ids_fit():
    llava = shrunk("llava")
    assert llava.text_config.hidden_size < 4096 and llava.vision_config.hidden_size < 1024
    assert llava.image_token_id < llava.text_config.vocab_size
    q = shrunk("qwen2_vl")
    assert q.image_token_id < q.text_config.vocab_size and q.video_token_id < q.text_config.vocab_size
    assert len({q.image_token_id, q.video_token_id, q.vision_start_token_id, q.vision_end_token_id}) == 4
    head_dim = q.text_config.hidden_size // q.text_config.num_attention_heads
    assert sum(q.text_config.rope_parameters["mrope_section"]) == head_dim // 2


def test_partial_config_and_pretrained_config_inputs():
    from transformers import BertConfig

    a = shrink_config({"model_type": "bert", "hidden_size": 1024, "num_attention_heads": 16})
    b = shrink_config(BertConfig(hidden_size=1024, num_attention_heads=16))
    assert a.to_dict()["hidden_size"] == b.to_dict()["hidden_size"] < 1024


def test_quantization_and_remote_code_fields_are_dropped():
    d = shrink_dict(
        {
            "model_type": "llama",
            "quantization_config": {"quant_method": "fp8"},
            "auto_map": {"AutoConfig": "x.Y"},
            "num_hidden_layers": 4,
        }
    )
    assert "quantization_config" not in d and "auto_map" not in d


@pytest.mark.slow
@pytest.mark.shared_data
def test_every_full_hub_config_of_a_known_type_shrinks_under_budget(full_configs_path):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from harness.build.models import architecture_of, model_class
    from harness.errors import UnknownArchitecture

    rows = [json.loads(line) for line in full_configs_path.read_text().splitlines() if line.strip()]
    known = [r for r in rows if r["config"].get("model_type") in CONFIG_MAPPING_NAMES]
    assert len(known) >= 70
    for row in known:
        cfg = row["config"]
        arch = (cfg.get("architectures") or [""])[0]
        try:
            model_class(arch)
        except UnknownArchitecture:
            arch = ""  # the type is known but not this class name: its base model
        spec = ModelSpec(row["id"], cfg["model_type"], arch, cfg)
        shrunk_cfg = resolve_config(spec)
        params = count_parameters_meta(shrunk_cfg, architecture_of(spec))
        assert params < BUDGET, (row["id"], params)
        assert (
            "quantization_config" not in shrunk_cfg.to_dict()
            or not shrunk_cfg.to_dict()["quantization_config"]
        )


def test_a_level_the_model_rejects_keeps_the_first_nonblank_line_of_its_error():
    """transformers' requires_backends errors start with a newline: the reason must still name the cause."""
    from harness.errors import ShrinkError

    def validate(cfg):
        raise ImportError(
            "\nDinatModel requires the natten library but it was not found in your environment.\n"
        )

    with pytest.raises(ShrinkError) as info:
        shrink_config({"model_type": "bert"}, "bert", validate=validate)
    assert "requires the natten library" in str(info.value)
    assert all("natten" in reason for reason in info.value.errors.values())


# --------------------------------------------------------------------------- per-layer and Hub-shaped configs
def test_per_layer_overrides_are_shrunk_as_their_level():
    """Dots3's sliding layers override heads and the nope part (`per_layer_config`): each override
    is shrunk as the level with its fields applied, so the config's own check (sliding head size =
    nope + rope) holds and the strongest level builds (not only `layers`, with 3.9B
    parameters)."""
    cfg = forward("dots3_note", "Dots3NoteForCausalLM")
    assert cfg._shrink_level == "full"
    t = cfg.text_config
    swa = t.per_layer_config["sliding_attention"]
    assert swa.head_dim == swa.qk_nope_head_dim + swa.qk_rope_head_dim
    assert swa.num_attention_heads <= t.num_attention_heads


def test_groups_tails_global_widths_and_unit_grids_follow_the_shrunk_sizes():
    """Mimi's depthwise upsampling has one group per channel (`upsample_groups` = hidden); BLT's
    local encoder reads the global transformer's width (`hidden_size_global`); EoMT's last
    `num_blocks` layers see the queries (at least one, after one plain layer); Hiera's token grid
    (image / patch_stride) is a whole number of masked units."""

    def cfg(model_type):
        return resolve_config(ModelSpec(f"catalog/{model_type}", model_type, ""))

    mimi = cfg("mimi")
    assert mimi.upsample_groups == mimi.hidden_size
    blt = cfg("blt")
    assert blt.encoder_config.hidden_size_global == blt.global_config.hidden_size
    eomt = cfg("eomt")
    assert 1 <= eomt.num_blocks < eomt.num_hidden_layers
    hiera = cfg("hiera")
    tokens = hiera.image_size[0] // hiera.patch_stride[0]
    assert (
        tokens % hiera.masked_unit_size[0] == 0
        and tokens % hiera.query_stride[0] ** hiera.num_query_pool == 0
    )


def test_a_forward_that_reads_use_cache_from_the_config_builds_no_cache():
    """GraniteMoeHybrid's forward takes no `use_cache` argument, so the config's decided: its
    default stack is all Mamba, and the cache it built could not give the attention mask's sizes.
    Shrunk configs run without a cache, as the inputs ask where the forward names it."""
    config = forward("granitemoehybrid", "GraniteMoeHybridForCausalLM")
    assert config.use_cache is False and set(config.layer_types) == {"linear_attention"}


def test_ernie_vl_height_and_width_sections_stay_paired_and_its_rope_runs():
    # ERNIE-4.5-VL stacks its height and width frequencies pairwise: the shrunk sections are equal
    architecture = "Ernie4_5_VLMoeModel"
    cfg = resolve_config(ModelSpec("test/ernie4_5_vl_moe", "ernie4_5_vl_moe", architecture))
    h, w, t = cfg.text_config.rope_parameters["mrope_section"]
    assert h == w and h + w + t == (cfg.text_config.hidden_size // cfg.text_config.num_attention_heads) // 2
    model = build_model(cfg, architecture, seed=0)
    inputs = make_inputs(model, cfg, architecture, seed=0)
    with torch.no_grad():
        assert torch.isfinite(model(**inputs.kwargs).last_hidden_state).all()


@pytest.mark.parametrize(
    "model_type, architecture", [("gptj", "GPTJForCausalLM"), ("codegen", "CodeGenModel")]
)
def test_rotary_dim_follows_the_head_size_when_the_config_has_no_head_dim(model_type, architecture):
    """GPT-J/CodeGen rotate `rotary_dim` of each head's features; the head size is hidden / heads
    (no `head_dim` field), and the rotary part shrinks in proportion to it."""
    config = forward(model_type, architecture)
    head = config.n_embd // config.n_head
    assert 2 <= config.rotary_dim <= head and config.rotary_dim % 2 == 0


def test_a_stem_width_that_names_a_stage_width_follows_it():
    config = forward("textnet", "TextNetForImageClassification")
    assert config.stem_out_channels == config.hidden_sizes[0]


@pytest.mark.parametrize(
    "model_type, architecture, field",
    [
        ("dpt", "DPTForDepthEstimation", "backbone_out_indices"),
        ("chmv2", "CHMv2ForDepthEstimation", "backbone_config.out_indices"),
    ],
)
def test_a_neck_keeps_as_many_tapped_layers_as_it_has_inputs(model_type, architecture, field):
    """DPT's neck reassembles the outputs of 4 chosen layers: 2 layers cannot feed it. The shrunk
    stack keeps 4 layers and taps each once."""
    config = forward(model_type, architecture)
    level = config
    for part in field.split(".")[:-1]:
        level = getattr(level, part)
    taps = getattr(level, field.split(".")[-1])
    assert len(taps) == 4 and len(set(taps)) == 4
    assert max(taps) <= level.num_hidden_layers


def test_a_text_projection_meets_an_unprojected_image_embedding():
    """ALIGN projects only the text, to `projection_dim`, which must equal its EfficientNet's last
    block width (round_filters(320) at the width coefficient); the image embedding is not
    projected, so both shrink together."""
    config = forward("align", "AlignModel")
    assert config.projection_dim == 320 * config.vision_config.width_coefficient


def test_a_vq_codebook_quantizing_the_vision_output_follows_its_width_and_fits_the_vocab():
    # GLM-Image: the VQ-VAE's latent channels are the vision width, its codes and the vision
    # vocab are text ids (the default's 16384-code book in a 1024-token shrunk vocab)
    cfg = resolve_config(ModelSpec("test/glm_image", "glm_image", "GlmImageModel"))
    assert cfg.vq_config.latent_channels == cfg.vision_config.hidden_size
    assert cfg.vq_config.num_embeddings <= cfg.text_config.vocab_size
    assert cfg.text_config.vision_vocab_size <= cfg.text_config.vocab_size


def test_an_adapter_projecting_to_the_text_width_follows_it_and_its_patch_token_fits_the_vocab():
    # Molmo2: the adapter's `text_hidden_size` is the text width (its default 3584 vs 4096), and
    # its image placeholder is `image_patch_id` (aliased `image_token_id`), 151938 unshrunk
    cfg = resolve_config(ModelSpec("test/molmo2", "molmo2", "Molmo2Model"))
    assert cfg.adapter_config.text_hidden_size == cfg.text_config.hidden_size
    assert cfg.image_token_id == cfg.image_patch_id < cfg.text_config.vocab_size


def test_a_scalar_naming_one_backbone_stage_width_follows_that_stage():
    """PP-DocLayout-V3's mask head reads the backbone's stride-4 stage: `x4_feat_dim` (128) is
    the HGNet-V2 backbone's first stage output (128); it follows that stage's shrunk width."""
    config = forward("pp_doclayout_v3", "PPDocLayoutV3Model")
    assert config.x4_feat_dim == config.backbone_config.stage_out_channels[0]


def test_a_decoder_start_taken_from_the_context_fits_in_the_context():
    """Autoformer's decoder starts from the last `label_length` (10) context steps; the context
    defaulted to the shrunk prediction length (8), shorter than that."""
    config = forward("autoformer", "AutoformerModel")
    assert config.label_length <= config.context_length


def test_per_label_lists_the_default_leaves_unset_get_one_entry_per_label():
    """PP-DocLayout-V2's head indexes `class_thresholds` and `class_order` by class id; the
    default leaves both None (every checkpoint sets them) and its forward raised on None."""
    config = forward("pp_doclayout_v2", "PPDocLayoutV2ForObjectDetection")
    assert len(config.class_thresholds) == len(config.class_order) == config.num_labels
