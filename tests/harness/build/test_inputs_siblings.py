"""A type without a usable image processor of its own is fed by the one of a type that shares its
processor class (transformers names the processor, not always its image processor)."""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import build_model, resolve_config


def test_a_type_sharing_a_processor_gets_its_siblings_image_layout():
    """ModernVBERT is fed by Idefics3Processor but maps no image processor; without one the
    synthesized 4-D `pixel_values` miss the (batch, images, channels, height, width) layout."""
    arch = "ModernVBertForSequenceClassification"
    config = resolve_config(ModelSpec("catalog/modernvbert", "modernvbert", arch))
    model = build_model(config, arch)
    inputs = make_inputs(model, config, arch)
    assert inputs.sources["pixel_values"].startswith("processor:Idefics3ImageProcessor")
    assert inputs.kwargs["pixel_values"].dim() == 5
    with torch.no_grad():
        model(**inputs.kwargs)
