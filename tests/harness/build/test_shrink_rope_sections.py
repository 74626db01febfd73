"""Multimodal rope sections keep the ties the modeling code relies on when they shrink (issue 10)."""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import build_model, resolve_config
from harness.build.shrink.layers import rescale_parts, rescale_parts_keeping_ties


def test_equal_parts_stay_equal_when_a_split_allows_it():
    assert rescale_parts([22, 22, 20], 4) == [2, 1, 1]  # plain largest remainder breaks the tie
    assert rescale_parts_keeping_ties([22, 22, 20], 4) == [1, 1, 2]
    assert rescale_parts_keeping_ties([16, 24, 24], 8) == [2, 3, 3]
    assert sum(rescale_parts_keeping_ties([11, 11, 10], 4)) == 4
    # no split keeps the tie: the proportional one
    assert rescale_parts_keeping_ties([22, 22], 3) == rescale_parts([22, 22], 3)


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
