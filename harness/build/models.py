"""From a ModelSpec to a tiny model with random weights: never a download, never remote code.

`resolve_config(spec)` completes a partial config with the type's defaults, shrinks it and makes it
ready for a deterministic training step (dropout 0, a pad token id: harness/build/train_mode.py);
`build_model(config, architecture, seed)` instantiates the transformers class named by the spec
(only classes shipped in the installed transformers; a name it does not know is an error, never a
fetch of custom code).

    >>> from contracts.records import ModelSpec
    >>> spec = ModelSpec("catalog/bert", "bert", "BertForMaskedLM")
    >>> model = build_model(resolve_config(spec), spec.architecture)
"""

from __future__ import annotations

from functools import cache

import torch

from agents.quiet import quiet_transformers
from contracts.timing import phase
from harness.build.shrink import shrink_config
from harness.build.train_mode import prepare_config, zero_dropout_modules
from harness.errors import UnknownArchitecture


@cache
def default_architecture(model_type: str) -> str | None:
    """The type's base model class (MODEL_MAPPING), or its first head class when it has none."""
    from transformers.models.auto import modeling_auto as ma

    name = ma.MODEL_MAPPING_NAMES.get(model_type)
    if isinstance(name, (tuple, list)):
        name = name[0]
    if name:
        return name
    for attr in sorted(dir(ma)):
        if attr.endswith("_MAPPING_NAMES") and attr.startswith("MODEL_FOR_"):
            name = getattr(ma, attr).get(model_type)
            if name:
                return name[0] if isinstance(name, (tuple, list)) else name
    return None


def model_class(architecture: str):
    import transformers

    if not architecture.isidentifier():
        raise UnknownArchitecture(f"not a class name: {architecture!r}")
    try:
        cls = getattr(transformers, architecture)
    except (AttributeError, ImportError) as exc:
        raise UnknownArchitecture(
            f"{architecture} is not in transformers {transformers.__version__}"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise UnknownArchitecture(f"{architecture} is not a transformers model class")
    return cls


def architecture_of(spec) -> str:
    arch = spec.architecture or default_architecture(spec.model_type)
    if not arch:
        raise UnknownArchitecture(f"model_type {spec.model_type!r} has no model class")
    return arch


def config_for(cls, config):
    """The config the class takes: the composite itself, or its sub-config of the class's type
    (MusicgenModel is built from the decoder part of a MusicgenConfig)."""
    wanted = getattr(cls, "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if isinstance(sub, wanted):
            return sub
    return config


def count_parameters_meta(config, architecture: str) -> int:
    """Parameter count without allocating memory (the model is built on the meta device).

    The weight initializers are switched off while it is built (transformers' `no_init_weights`:
    on meta they compute nothing, yet each `uniform_`/`normal_` runs Python meta kernels, a large
    share of the time a full-tier listing spends counting); weight tying, which that also skips
    and which decides the count, is done afterwards."""
    from transformers.initialization import no_init_weights

    cls = model_class(architecture)
    with quiet_transformers(), torch.device("meta"), no_init_weights():
        model = cls(config_for(cls, config))
    model.tie_weights()
    return sum(p.numel() for p in model.parameters())


@phase("shrink")  # the nightly's time shares (contracts.timing)
def resolve_config(spec, *, validate_architecture: bool = True):
    """The spec's config (partial or full) completed with defaults, then shrunk.

    With `validate_architecture` a shrink level counts only when the model class can be built
    from it (on the meta device), so the weakest level is chosen only when it must be.
    """
    config = dict(spec.config or {})
    config.setdefault("model_type", spec.model_type)
    arch = None
    if validate_architecture:
        try:
            arch = architecture_of(spec)
            model_class(arch)
        except UnknownArchitecture:
            arch = None
    validate = (lambda cfg: count_parameters_meta(cfg, arch)) if arch else None
    shrunk = shrink_config(config, spec.model_type, validate=validate)
    shrunk._shrink_train_mode_changes = prepare_config(shrunk)
    return shrunk


def build_model(
    config, architecture: str, seed: int = 0, device: str | torch.device = "cpu"
) -> torch.nn.Module:
    """Random-weight model of `architecture` from `config`, seeded, in eval mode, every dropout
    probability 0 (so a train-mode step is deterministic too)."""
    cls = model_class(architecture)
    torch.manual_seed(seed)
    with quiet_transformers():
        model = cls(config_for(cls, config))
    zero_dropout_modules(model)
    model.eval()
    return model.to(device) if str(device) != "cpu" else model


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
