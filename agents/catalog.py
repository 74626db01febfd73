"""The offline catalog: every architecture the installed transformers knows, as crawl-store records.

Source of truth is transformers itself: CONFIG_MAPPING_NAMES (model types) and the
MODEL_*_MAPPING_NAMES head mappings. One record per distinct (model_type, class) pair, id
``catalog/<model_type>/<ClassName>``; a class listed under several heads (e.g. BloomForCausalLM
under causal LM and pre-training) is one record whose `head` is the first head in
catalog_heads.yaml order and whose tags list every head (``head:<name>``). Model types with a
config but no model class of their own (sub-configs such as ``clip_text_model``) appear once as
``catalog/<model_type>`` with status broken / reason ``config_only_type`` so every type is
accounted for. Each record carries the type's canonical default config (``config_class().to_dict()``,
config_level ``default``); a default that cannot be built is recorded as ``config_not_instantiable``.
Order is deterministic: model types sorted, the base class first, then classes by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache

from pydantic import RootModel

from agents.quiet import quiet_transformers
from agents.store import ModelRecord
from contracts.rulefiles import Rules, cached_rules, resource

CATALOG_PREFIX = "catalog/"


@dataclass(frozen=True)
class Head:
    mapping: str  # e.g. MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    head: str  # e.g. causal_lm
    pipeline_tag: str | None


@dataclass(frozen=True)
class CatalogEntry:
    """One (model_type, class) pair with every head mapping that lists it."""

    model_type: str
    architecture: str
    heads: tuple[Head, ...]

    @property
    def is_base(self) -> bool:
        return any(h.head == "base" for h in self.heads)

    @property
    def id(self) -> str:
        return f"{CATALOG_PREFIX}{self.model_type}/{self.architecture}"


class HeadSpec(Rules):
    head: str
    pipeline_tag: str | None  # null: the Hub has no task tag for that head


class HeadMappings(RootModel[dict[str, HeadSpec]]):
    """agents/catalog_heads.yaml: transformers' head mappings -> (head, pipeline_tag), by priority."""


@lru_cache(maxsize=1)
def head_table() -> tuple[Head, ...]:
    """Head mappings in priority order, from catalog_heads.yaml."""
    data = cached_rules(HeadMappings, str(resource("agents", "catalog_heads.yaml"))).root
    return tuple(Head(name, spec.head, spec.pipeline_tag) for name, spec in data.items())


@lru_cache(maxsize=1)
def model_types() -> tuple[str, ...]:
    """Every model_type in the installed transformers' CONFIG_MAPPING, sorted."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return tuple(sorted(CONFIG_MAPPING_NAMES))


@lru_cache(maxsize=1)
def entries() -> tuple[CatalogEntry, ...]:
    """All (model_type, class) pairs from the head mappings, deterministic order."""
    from transformers.models.auto import modeling_auto

    heads = head_table()
    known = {h.mapping for h in heads}
    present = {n for n in dir(modeling_auto) if n.startswith("MODEL_") and n.endswith("_MAPPING_NAMES")}
    unknown = present - known
    if unknown:  # a newer transformers added a head: keep it rather than lose its classes
        heads = heads + tuple(
            Head(n, n.removeprefix("MODEL_FOR_").removesuffix("_MAPPING_NAMES").lower(), None)
            for n in sorted(unknown)
        )
    pairs: dict[tuple[str, str], list[Head]] = {}
    for head in heads:
        mapping = getattr(modeling_auto, head.mapping, None) or {}
        for model_type, classes in mapping.items():
            for cls in (classes,) if isinstance(classes, str) else tuple(classes):
                pairs.setdefault((model_type, cls), []).append(head)
    out = [CatalogEntry(t, c, tuple(hs)) for (t, c), hs in pairs.items()]
    out.sort(key=lambda e: (e.model_type, not e.is_base, e.architecture))
    return tuple(out)


@lru_cache(maxsize=1)
def architecture_index() -> dict[str, tuple[str, ...]]:
    """Class name -> the model types whose head mappings list it."""
    index: dict[str, list[str]] = {}
    for e in entries():
        index.setdefault(e.architecture, [])
        if e.model_type not in index[e.architecture]:
            index[e.architecture].append(e.model_type)
    return {k: tuple(v) for k, v in index.items()}


def infer_model_type(architectures: list[str]) -> tuple[str | None, list[str]]:
    """The model_type a config's classes belong to, and all candidates.

    A class can be listed under several types (GPT2LMHeadModel under gpt2 and gpt-sw3); the type
    whose transformers module defines the class wins. None when there is no unique answer.
    """
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    candidates = sorted({t for a in architectures for t in architecture_index().get(a, ())})
    if len(candidates) <= 1:
        return (candidates[0] if candidates else None), candidates
    import transformers

    class_to_module = getattr(transformers, "_class_to_module", {}) or {}
    homes = {
        class_to_module.get(a, "").split(".")[1]
        for a in architectures
        if class_to_module.get(a, "").count(".") >= 1
    }
    own = [t for t in candidates if model_type_to_module_name(t).split(".")[-1] in homes]
    return (own[0] if len(own) == 1 else None), candidates


def is_known_architecture(name: str) -> bool:
    """True when the installed transformers exports a class of this name (no import needed)."""
    if name in architecture_index():
        return True
    import transformers

    class_to_module = getattr(transformers, "_class_to_module", None)
    if class_to_module is not None:
        return name in class_to_module
    return hasattr(transformers, name)  # fallback: imports the module


@cache
def default_config_json(model_type: str) -> str:
    """JSON text of the type's canonical default config; raises when it cannot be built."""
    from transformers import CONFIG_MAPPING

    with quiet_transformers():
        config = CONFIG_MAPPING[model_type]()
        return json.dumps(config.to_dict(), sort_keys=True, default=str)


def iter_catalog(model_types_filter: set[str] | None = None) -> Iterator[ModelRecord]:
    """Every catalog record: the (type, class) pairs, then one row per config-only type."""
    by_type: dict[str, list[CatalogEntry]] = {}
    for e in entries():
        by_type.setdefault(e.model_type, []).append(e)
    for model_type in model_types():
        if model_types_filter is not None and model_type not in model_types_filter:
            continue
        try:
            config, error = default_config_json(model_type), ""
        except Exception as exc:  # noqa: BLE001 - recorded, never raised
            config, error = None, " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        type_entries = by_type.get(model_type, [])
        if not type_entries:
            yield ModelRecord(
                id=f"{CATALOG_PREFIX}{model_type}",
                source="catalog",
                model_type=model_type,
                config=config,
                config_level="default" if config else None,
                status="broken",
                broken_reason="config_only_type",
                broken_detail="no model class in any transformers auto mapping (a sub-config)",
                downloads=0,
                tags=[],
            )
            continue
        for e in type_entries:
            primary = e.heads[0]
            yield ModelRecord(
                id=e.id,
                source="catalog",
                downloads=0,
                pipeline_tag=primary.pipeline_tag,
                library_name="transformers",
                tags=[f"head:{h.head}" for h in e.heads],
                model_type=model_type,
                architectures=[e.architecture],
                config=config,
                config_level="default" if config else None,
                status="ok" if config else "broken",
                broken_reason=None if config else "config_not_instantiable",
                broken_detail="" if config else error,
                is_base=e.is_base,
                head=primary.head,
            )


def catalog_counts() -> dict[str, int]:
    """The numbers the README quotes: types, types with a model class, pairs, heads."""
    es = entries()
    return {
        "model_types": len(model_types()),
        "types_with_model_class": len({e.model_type for e in es}),
        "types_with_base_model": len({e.model_type for e in es if e.is_base}),
        "type_class_pairs": len(es),
        "type_head_pairs": sum(len(e.heads) for e in es),
    }
