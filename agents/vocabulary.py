"""The trait vocabulary (agents/data/traits.yaml): trait names' closed value sets and rule tables.

Its own module because both the trait rules (agents.traits) and the per-type profiles
(agents.type_profiles) read it, and traits builds on profiles. Loaded into `TraitVocabulary`: an
unknown key, or a type override / coverage target naming a trait that does not exist, is a
RuleFileError naming the file and the entry.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contracts.rulefiles import Rules, cached_rules, resource

#: The value of a trait that cannot be told (never a guess).
UNKNOWN = "unknown"


class TraitSpec(Rules):
    values: Literal["open"] | tuple[str, ...]  # "open": any value (model_type, head)
    doc: str = ""


class ConfigKeys(Rules):
    """The config keys each rule reads, first present wins."""

    heads: tuple[str, ...]
    kv_heads: tuple[str, ...]
    experts: tuple[str, ...]
    shared_experts: tuple[str, ...]
    shared_expert_size: tuple[str, ...]
    top_k: tuple[str, ...]
    activation: tuple[str, ...]
    dtype: tuple[str, ...]
    text_subconfig: tuple[str, ...]
    rms_eps: tuple[str, ...]
    ln_eps: tuple[str, ...]


class SourcePatterns(Rules):
    """Regular expressions over a model type's modeling source: value -> pattern."""

    position: dict[str, str]
    norm: dict[str, str]


class TraitVocabulary(Rules):
    """agents/data/traits.yaml (its comments say what each table is for)."""

    version: int
    traits: dict[str, TraitSpec]
    interacting_pairs: tuple[tuple[str, str], ...]
    cover_traits: tuple[str, ...]
    variable_keys: dict[str, tuple[str | tuple[str, ...], ...]]  # a group: a key or its aliases
    keys: ConfigKeys
    layer_kinds: dict[str, str]
    pattern_chars: dict[str, str]
    activation_families: dict[str, tuple[str | None, ...]]
    dtype_values: dict[str, tuple[str | None, ...]]
    quantization_methods: dict[str, tuple[str | None, ...]]
    rope_types: dict[str, tuple[str | None, ...]]
    head_priority: tuple[str, ...]
    class_suffix_heads: dict[str, str]
    modality_from_heads: tuple[tuple[str, tuple[str, ...]], ...]
    source_patterns: SourcePatterns
    type_overrides: dict[str, dict[str, str]] = Field(default_factory=dict)  # model_type -> trait -> value

    @model_validator(mode="after")
    def _names_are_traits(self) -> TraitVocabulary:
        named = {
            "cover_traits": self.cover_traits,
            "interacting_pairs": [t for pair in self.interacting_pairs for t in pair],
            "variable_keys": list(self.variable_keys),
            **{f"type_overrides.{mt}": list(o) for mt, o in self.type_overrides.items()},
        }
        for entry, names in named.items():
            unknown = sorted(set(names) - set(self.traits))
            if unknown:
                raise ValueError(f"{entry}: unknown trait {unknown} (traits lists {', '.join(self.traits)})")
        for mt, overrides in self.type_overrides.items():
            for trait, value in overrides.items():
                closed = self.traits[trait].values
                if closed != "open" and value not in closed:
                    raise ValueError(f"type_overrides.{mt}.{trait}: {value!r} is not one of {list(closed)}")
        return self


def vocabulary() -> TraitVocabulary:
    """The trait vocabulary and rule tables, read once per process."""
    return cached_rules(TraitVocabulary, str(resource("agents", "data/traits.yaml")))


def allowed_values(trait: str) -> set[str] | None:
    """The closed value set of a trait (with unknown), or None for open traits (model_type, head)."""
    spec = vocabulary().traits[trait]
    if spec.values == "open":
        return None
    return {str(v) for v in spec.values} | {UNKNOWN}
