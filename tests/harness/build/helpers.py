"""What the build tests share: a catalog type's shrunk model and its inputs, run forward or
trained on cpu, or checked through the load/forward/backward stages."""

from __future__ import annotations

import torch

from contracts.records import ModelSpec
from harness.build.inputs import make_inputs
from harness.build.models import architecture_of, build_model, count_parameters_meta, resolve_config
from harness.build.rules import shrink_rules
from harness.stages.check import check_model

BUDGET = shrink_rules().targets.max_parameters
SEQ = shrink_rules().targets.test_sequence_length
STAGES = ["load", "forward", "backward"]


def forward(model_type: str, architecture: str, config: dict | None = None):
    """Shrink, build and run one forward (no grad); returns the shrunk config for the checks."""
    spec = ModelSpec(f"catalog/{model_type}/{architecture}", model_type, architecture, config or {})
    cfg = resolve_config(spec)
    model = build_model(cfg, architecture)
    with torch.no_grad():
        model(**make_inputs(model, cfg, architecture).kwargs)
    return cfg


def shrunk(model_type: str, architecture: str = "", **config):
    """The shrunk config of a (partial) config, under the budget at the strongest level."""
    spec = ModelSpec(f"test/{model_type}", model_type, architecture, dict(config, model_type=model_type))
    cfg = resolve_config(spec)
    params = count_parameters_meta(cfg, architecture_of(spec))
    assert params < BUDGET, f"{model_type}: {params} parameters"
    assert cfg._shrink_level == "full", cfg._shrink_errors
    return cfg


def model_of(model_type: str, architecture: str):
    """The shrunk config's model (seeded): (model, config)."""
    cfg = resolve_config(ModelSpec(f"test/{model_type}", model_type, architecture))
    return build_model(cfg, architecture, seed=0), cfg


def built(model_type: str, architecture: str, **overrides):
    """The shrunk config (with `overrides` set on it), its seeded model and synthesized inputs:
    (model, config, inputs)."""
    cfg = resolve_config(ModelSpec(f"test/{model_type}", model_type, architecture))
    for name, value in overrides.items():
        setattr(cfg, name, value)
    model = build_model(cfg, architecture, seed=0)
    return model, cfg, make_inputs(model, cfg, architecture, seed=0)


def runs(model, inputs):
    """One forward without grad; its output."""
    with torch.no_grad():
        return model(**inputs.kwargs)


def trains(model, inputs) -> torch.Tensor:
    """Forward and backward in train mode (the head's loss when it got labels, else the mean of
    squares of the outputs); the loss used."""
    model.train()
    out = model(**inputs.kwargs)
    loss = getattr(out, "loss", None) if inputs.has_labels else None
    if loss is None:
        floats = [
            v
            for v in (out.values() if hasattr(out, "values") else out)
            if isinstance(v, torch.Tensor) and v.is_floating_point()
        ]
        loss = sum(v.float().pow(2).mean() for v in floats)
    loss.backward()
    assert torch.isfinite(loss)
    assert any(p.grad is not None for p in model.parameters())
    return loss


def stages(model_type: str, architecture: str, names=STAGES) -> dict:
    """{stage: (status, reason)} of a cpu check through `names`."""
    result = check_model(
        ModelSpec(f"test/{model_type}", model_type, architecture), backend="cpu", stages=list(names)
    )
    return {s: (r.status.value, r.reason) for s, r in result.stages.items()}


def passes(model_type: str, architecture: str) -> dict:
    """Load, forward and backward pass on cpu; {stage: its metrics}."""
    result = check_model(
        ModelSpec(f"test/{model_type}", model_type, architecture), backend="cpu", stages=STAGES
    )
    bad = {s: r.reason for s, r in result.stages.items() if r.status.value != "pass"}
    assert not bad, bad
    return {s: r.metrics for s, r in result.stages.items()}


def forward_passes(model_type: str, architecture: str, stages=("load", "forward")) -> dict:
    """Load and forward pass on cpu; the load stage's metrics."""
    result = check_model(
        ModelSpec(f"test/{model_type}", model_type, architecture), backend="cpu", stages=list(stages)
    )
    bad = {s: r.reason for s, r in result.stages.items() if r.status.value != "pass"}
    assert not bad, bad
    return result.stages["load"].metrics
