"""Typed records that cross module boundaries: what a model to check is, and what a tier case is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelSpec:
    """One model to check: where it came from and the config to build it from.

    `config` is a config.json dict (full, partial size fields, or just model_type); the shrinker
    completes it from the type's default config and makes it tiny.
    """

    model_id: str
    model_type: str
    architecture: str = ""  # transformers class, e.g. "LlamaForCausalLM"; "" = the type's base model
    config: dict[str, Any] = field(default_factory=dict)
    downloads: int = 0
    source: str = ""  # catalog | hub | snapshot | file


@dataclass
class Case:
    """One unit of work of a tier, as the runner schedules it (JSON-able payload, picklable).

    A full-tier case stands for every model whose shrunk config is identical: `model_ids` lists
    them and `weight` is their summed downloads, so the outcome is attributed to each.
    """

    case_id: str
    tier: str  # unit | representative | full
    payload: dict[str, Any] = field(default_factory=dict)
    model_ids: list[str] = field(default_factory=list)
    weight: float = 0.0
