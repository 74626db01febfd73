"""The full tier's population and its deduplication into one Case per distinct architecture.

Why: the Hub has tens of thousands of models but only a few thousand distinct architectures once
shrunk. Models whose shrunk configs are identical (`harness.build.signature.architecture_signature`) run
once; the outcome is attributed to each (Case.model_ids, Case.weight = their summed downloads).
Models that cannot be run at all (broken config, no model_type, a type the installed transformers
does not know) are kept as `not_attempted` cases with the reason, so the denominators stay honest.

Sources: None = the offline catalog (agents.catalog), a directory or .parquet = a crawl store
(agents.store), a .jsonl/.jsonl.gz file = a Hub metadata snapshot (like ../shared/data/hub).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.store import ModelRecord
from contracts.records import Case, ModelSpec


@dataclass
class Member:
    """One model of the population: a spec to run, or the reason it cannot run."""

    model_id: str
    downloads: int = 0
    spec: ModelSpec | None = None
    not_runnable: str = ""  # reason code when spec is None


def load_population(source: str | None, instantiate: bool = False) -> list[Member]:
    """Read the population from the catalog (None), a crawl store, or a snapshot file.

    `instantiate` asks the snapshot triage to build each config (slower; the check reports
    the same failures at its load stage anyway).
    """
    if source is None:
        from agents import catalog

        return [_member(r) for r in catalog.iter_catalog()]
    path = Path(source)
    if path.is_dir() or path.suffix == ".parquet":
        from agents.store import read_store

        return [_member(r) for r in read_store(path)]
    if path.name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")):
        from agents.snapshot import iter_snapshot

        return [_member(r) for r in iter_snapshot(path, instantiate=instantiate)]
    raise ValueError(f"{source}: not a crawl store directory, .parquet store or .jsonl[.gz] snapshot")


def _member(rec: ModelRecord) -> Member:
    """A crawl-store / catalog / snapshot record -> Member (ModelRecord.to_spec builds the spec)."""
    downloads = int(rec.downloads or 0)
    if rec.status == "broken":
        return Member(rec.id, downloads, not_runnable=str(rec.broken_reason or "broken"))
    if rec.config and rec.config_dict() is None:
        return Member(rec.id, downloads, not_runnable="config_not_json")
    spec = rec.to_spec()
    if not spec.model_type:
        return Member(rec.id, downloads, not_runnable="no_model_type")
    if not _known_type(spec.model_type):
        return Member(rec.id, downloads, not_runnable="unknown_model_type")
    return Member(rec.id, downloads, spec)


def _known_type(model_type: str) -> bool:
    from transformers import CONFIG_MAPPING

    return model_type in CONFIG_MAPPING


def _case_key(item: tuple[str, str, dict[str, Any]]) -> str:
    """(model_type, architecture, config) -> "type/signature" (runs in pool processes too)."""
    from harness.build.signature import architecture_signature

    model_type, arch, config = item
    spec = ModelSpec(model_id="", model_type=model_type, architecture=arch, config=config)
    try:
        sig = architecture_signature(spec)  # 16 hex digits
    except Exception as exc:  # noqa: BLE001 - the check will record the real error at load
        sig = hashlib.sha1(f"unsignable-{type(exc).__name__}".encode()).hexdigest()[:16]
    return f"{model_type}/{sig}"


def signature_keys(items: list[tuple[str, str, dict[str, Any]]], workers: int = 1) -> list[str]:
    """Case keys of distinct (type, arch, config) items, in a process pool when it pays off."""
    if workers <= 1 or len(items) < 64:
        return [_case_key(i) for i in items]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        return list(pool.map(_case_key, items, chunksize=max(1, len(items) // (workers * 8))))


def sample_members(
    members: list[Member], limit: int, workers: int = 1, registry: str | None = None
) -> list[Member]:
    """Members in coverage order (harness.tiers.quick_subset: trait values, interacting pairs and recorded
    ops; ties by downloads, then a stable hash) until `limit` distinct architectures are seen: a
    --limit run does not pay for the signatures of the whole population, and its sample covers as
    much as its size allows. Groups may then hold only the members scanned so far (a sample)."""
    from harness.tiers.quick_subset import coverage_order

    runnable = [m for m in members if m.spec is not None]
    by_id = {id(m.spec): m for m in runnable}
    ordered = [by_id[id(s)] for s in coverage_order([m.spec for m in runnable], registry)]
    seen: set[str] = set()
    taken: list[Member] = []
    step = max(8, 2 * limit)
    for start in range(0, len(ordered), step):
        batch = ordered[start : start + step]
        items = [(m.spec.model_type, m.spec.architecture, m.spec.config) for m in batch]
        for m, key in zip(batch, signature_keys(items, workers)):
            if key not in seen and len(seen) >= limit:
                return taken  # exactly `limit` architectures, so the runner's cut keeps this order's head
            taken.append(m)
            seen.add(key)
    return taken


def dedupe_cases(members: list[Member], tier: str = "full", workers: int = 1) -> list[Case]:
    """One Case per distinct architecture signature (most downloaded first), then not-runnable groups."""
    contents: dict[str, tuple[str, str, dict[str, Any]]] = {}
    member_content: list[tuple[Member, str]] = []
    unrunnable: dict[str, list[Member]] = defaultdict(list)
    for m in members:
        if m.spec is None:
            unrunnable[m.not_runnable].append(m)
            continue
        content = json.dumps(
            [m.spec.model_type, m.spec.architecture, m.spec.config], sort_keys=True, default=str
        )
        contents.setdefault(content, (m.spec.model_type, m.spec.architecture, m.spec.config))
        member_content.append((m, content))
    keys = dict(zip(contents, signature_keys(list(contents.values()), workers)))
    groups: dict[str, list[Member]] = defaultdict(list)
    for m, content in member_content:
        groups[keys[content]].append(m)
    cases = []
    for key, group in groups.items():
        group.sort(key=lambda m: (-m.downloads, m.model_id))
        cases.append(
            Case.for_spec(
                group[0].spec,
                tier,
                case_id=key,
                model_ids=[m.model_id for m in group],
                weight=float(sum(m.downloads for m in group)),
                info={"signature": key.rsplit("/", 1)[-1]},
            )
        )
    # most downloaded first; ties (the catalog has no downloads) in a stable pseudo-random order so
    # that a --limit samples across model types instead of taking the alphabet's head
    cases.sort(key=lambda c: (-c.weight, -len(c.model_ids), hashlib.sha1(c.case_id.encode()).hexdigest()))
    for reason, group in sorted(unrunnable.items()):
        group.sort(key=lambda m: (-m.downloads, m.model_id))
        cases.append(
            Case(
                case_id=f"not_attempted/{reason}",
                tier=tier,
                payload={"not_attempted": reason},
                model_ids=[m.model_id for m in group],
                weight=float(sum(m.downloads for m in group)),
            )
        )
    return cases
