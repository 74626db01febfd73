"""What the shrink and input tests share: build a catalog type's shrunk model, its inputs, and run
it forward on cpu."""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import build_model, resolve_config


def forward(model_type: str, architecture: str):
    """Shrink, build and run one forward (no grad); returns the shrunk config for the checks."""
    config = resolve_config(ModelSpec(f"catalog/{model_type}/{architecture}", model_type, architecture))
    model = build_model(config, architecture)
    with torch.no_grad():
        model(**make_inputs(model, config, architecture).kwargs)
    return config


def built(model_type: str, architecture: str):
    """The shrunk config's model (seeded) with its synthesized inputs: (model, config, inputs)."""
    cfg = resolve_config(ModelSpec(f"test/{model_type}", model_type, architecture))
    model = build_model(cfg, architecture, seed=0)
    return model, cfg, make_inputs(model, cfg, architecture, seed=0)


def runs(model, inputs):
    """One forward without grad; its output."""
    with torch.no_grad():
        return model(**inputs.kwargs)
