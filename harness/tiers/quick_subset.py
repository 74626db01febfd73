"""Which models a limited model tier runs: chosen for coverage, not by position.

A `--limit N` (the quick nightly's representative and full tiers) keeps the N models that together
cover the most trait values, interacting trait pairs (agents.select's universe) and recorded ops
(the shape registry's ops each model was seen calling; a model the registry does not know gets
the ops recorded from models of its type). The rule is greedy maximum coverage: repeatedly take
the model with the most elements not yet covered; ties go to more downloads, then to the smaller
sha1 of the model id. It is deterministic and never looks at results, so a quick nightly runs
the same sample every night until the population or the registry changes.

    order = coverage_order(specs, registry_path)   # the whole list, best first
    report = subset_coverage(order[:4], registry_path)  # share of the registry's ops exercised
"""

from __future__ import annotations

import hashlib
import heapq
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from contracts.records import ModelSpec

T = TypeVar("T")


def registry_ops_by_model(registry_path: str | Path | None) -> dict[str, frozenset[str]]:
    """Model id -> the ops the registry recorded from it (reads two columns only)."""
    import pyarrow.parquet as pq

    from registry.unit_tier import default_registry_path

    path = Path(registry_path) if registry_path else default_registry_path()
    if not path.is_file():
        return {}
    table = pq.read_table(path, columns=["op", "models"])
    out: dict[str, set[str]] = defaultdict(set)
    for op, models in zip(table.column("op").to_pylist(), table.column("models").to_pylist()):
        for m in models or []:
            out[m].add(op)
    return {m: frozenset(ops) for m, ops in out.items()}


def ops_of(specs: Sequence[ModelSpec], by_model: dict[str, frozenset[str]]) -> list[frozenset[str]]:
    """Recorded ops per spec: its own, else those recorded from specs of its model type."""
    by_type: dict[str, set[str]] = defaultdict(set)
    for s in specs:
        if s.model_id in by_model:
            by_type[s.model_type] |= by_model[s.model_id]
    return [by_model.get(s.model_id) or frozenset(by_type.get(s.model_type, ())) for s in specs]


def traits_of(spec: ModelSpec) -> dict[str, Any] | None:
    """The spec's architectural traits (agents.traits) for coverage by trait; None if unavailable."""
    try:
        from dataclasses import asdict as _asdict

        from agents.traits import extract_traits

        level = "full" if len(spec.config) > 5 else ("partial" if spec.config else None)
        record = extract_traits(
            spec.config,
            model_type=spec.model_type,
            architectures=[spec.architecture] if spec.architecture else None,
            config_level=level,
        )
        if hasattr(record, "to_dict"):
            return record.to_dict()
        return _asdict(record) if hasattr(record, "__dataclass_fields__") else dict(record)
    except Exception:  # noqa: BLE001 - a label must never fail a case
        return None


def trait_elements(spec: ModelSpec) -> frozenset[str]:
    from agents.select import elements_of

    traits = traits_of(spec) or {}
    return frozenset(elements_of({k: str(v) for k, v in traits.items() if v is not None}))


def elements(specs: Sequence[ModelSpec], registry_path: str | Path | None = None) -> list[frozenset[str]]:
    ops = ops_of(specs, registry_ops_by_model(registry_path))
    return [trait_elements(s) | {f"op:{o}" for o in spec_ops} for s, spec_ops in zip(specs, ops)]


def _tie(model_id: str, downloads: int) -> tuple:
    return (-int(downloads or 0), hashlib.sha1(model_id.encode()).hexdigest())


def greedy_order(items: Sequence[T], sets: Sequence[frozenset[str]], tie: Callable[[T], tuple]) -> list[T]:
    """Every item, ordered by greedy maximum coverage (lazy evaluation with a heap)."""
    covered: set[str] = set()
    heap = [(-len(s), tie(item), i) for i, (item, s) in enumerate(zip(items, sets))]
    heapq.heapify(heap)
    out: list[T] = []
    while heap:
        neg, key, i = heapq.heappop(heap)
        gain = len(sets[i] - covered)
        if gain != -neg:  # stale: push back with the current gain
            heapq.heappush(heap, (-gain, key, i))
            continue
        out.append(items[i])
        covered |= sets[i]
    return out


def coverage_order(specs: Sequence[ModelSpec], registry_path: str | Path | None = None) -> list[ModelSpec]:
    return greedy_order(list(specs), elements(specs, registry_path), lambda s: _tie(s.model_id, s.downloads))


def subset_coverage(
    subset: Sequence[ModelSpec], population: Sequence[ModelSpec], registry_path: str | Path | None = None
) -> dict[str, Any]:
    """What a subset exercises: recorded ops (share of the registry's ops) and trait elements."""
    by_model = registry_ops_by_model(registry_path)
    all_ops = set().union(*by_model.values()) if by_model else set()
    ids = {s.model_id for s in subset}
    pop_ops = ops_of(list(population), by_model)
    ops = set().union(*[o for s, o in zip(population, pop_ops) if s.model_id in ids]) if ids else set()
    traits = set().union(*[trait_elements(s) for s in subset]) if subset else set()
    universe = set().union(*[trait_elements(s) for s in population]) if population else set()
    return {
        "models": len(subset),
        "ops": len(ops),
        "registry_ops": len(all_ops),
        "ops_share": (len(ops & all_ops) / len(all_ops)) if all_ops else None,
        "trait_elements": len(traits),
        "trait_elements_total": len(universe),
    }
