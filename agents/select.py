"""Representative selection: the fewest models that cover every trait value and every pair of
values of interacting traits in a population, preferring popular then small models.

Algorithm: weighted greedy set cover (Chvatal 1979). The universe is every known trait value
(``attention=gqa-8``) and every pair of values of interacting traits (``attention=mla&position=rope``)
present among the population's usable (status ok) models. Each candidate covers the elements of its
own trait record and costs ``2 - log1p(downloads)/log1p(max downloads)`` (1 for the most downloaded
model, 2 for an undownloaded one). Greedy repeatedly takes the candidate with the most newly covered
elements per unit cost; ties go to more downloads, then fewer parameters, then the smaller id, so
the result is deterministic. Bound: the greedy cover costs at most H(d) <= ln d + 1 times the optimal
cover, d = the largest number of elements one model covers (H = harmonic number); costs lie in
[1, 2], so it has at most 2 H(d) times as many models as the smallest cover.

Candidates with an identical trait signature are interchangeable for the cover, so only the best of
each signature group (most downloads, then smallest, then id) competes, which keeps 100,000 models fast.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agents.store import ModelRecord
from agents.traits import parse_config
from agents.vocabulary import UNKNOWN, vocabulary
from contracts.records import ModelSpec
from contracts.settings import current

REPRESENTATIVES_FILE = "representatives.parquet"
SELECTION_FILE = "selection.json"
META_KEY = b"harness.selection"


@dataclass
class Representative:
    id: str
    model_type: str
    architecture: str
    config: str  # JSON text
    downloads: int
    covers: list[str]  # every universe element (trait value or interacting pair) this model has
    first_covered: list[str]  # the elements it was the first representative to cover
    cluster_download_share: float  # share of the population's downloads nearest to this representative
    cluster_models: int  # how many models that cluster holds
    source: str = ""
    param_estimate: float = math.inf


@dataclass
class Selection:
    representatives: list[Representative]
    eligible: int  # rows considered (status ok)
    universe: int  # trait values + interacting pairs to cover
    covered: int  # how many of them the representatives cover (== universe unless empty)
    max_set_size: int  # d in the H(d) bound
    greedy_bound: float  # H(d)
    download_weighted_coverage: float  # share of downloads whose exact trait signature a representative has
    model_coverage: float  # same, counting models instead of downloads
    total_downloads: int
    stats: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("representatives")
        d["representatives"] = len(self.representatives)
        return d


def cover_traits() -> list[str]:
    return list(vocabulary().cover_traits)


def interacting_pairs() -> list[tuple[str, str]]:
    return [tuple(p) for p in vocabulary().interacting_pairs]


def elements_of(traits: Mapping[str, str]) -> list[str]:
    """The universe elements one trait record has: known values and interacting pairs of known values."""
    out = [f"{t}={traits[t]}" for t in cover_traits() if traits.get(t, UNKNOWN) != UNKNOWN]
    for a, b in interacting_pairs():
        va, vb = traits.get(a, UNKNOWN), traits.get(b, UNKNOWN)
        if va != UNKNOWN and vb != UNKNOWN:
            out.append(f"{a}={va}&{b}={vb}")
    return out


@lru_cache(maxsize=200_000)
def estimate_params(config: str | None) -> float:
    """Rough parameter count from size fields (inf when the config does not give them)."""
    cfg = parse_config(config)
    if not cfg:
        return math.inf
    for key in vocabulary().keys.text_subconfig:
        if isinstance(cfg.get(key), dict) and cfg[key]:
            cfg = {**cfg, **cfg[key]}
            break

    def num(*keys: str) -> float | None:
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                return float(v)
        return None

    h = num("hidden_size", "n_embd", "d_model", "dim")
    layers = num("num_hidden_layers", "n_layer", "num_layers", "n_layers")
    if h is None or layers is None:
        return math.inf
    inter = num("intermediate_size", "d_ff", "n_inner", "ffn_dim", "moe_intermediate_size") or 4 * h
    experts = num("num_local_experts", "num_experts", "n_routed_experts") or 1.0
    vocab = num("vocab_size") or 0.0
    return layers * (4 * h * h + 3 * h * inter * experts) + vocab * h


def _signature_groups(frame: pd.DataFrame, traits: Sequence[str]) -> pd.DataFrame:
    """One row per distinct trait signature: its best candidate and its members' totals."""
    ranked = frame.sort_values(
        ["downloads", "param_estimate", "id"], ascending=[False, True, True], kind="mergesort"
    )
    grouped = ranked.groupby(list(traits), sort=False, dropna=False)
    best = grouped.head(1).set_index(list(traits))
    totals = grouped.agg(group_downloads=("downloads", "sum"), group_models=("id", "size"))
    return best.join(totals).reset_index()


def select(frame: pd.DataFrame, *, coverage_target: float | None = None) -> Selection:
    """Choose representatives from a frame with id, the trait columns, downloads, config,
    model_type, architecture (and optional source, status). Rows with status != ok are ignored."""
    traits = cover_traits()
    df = frame
    if "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]
    df = df.copy()
    df["downloads"] = pd.to_numeric(df["downloads"], errors="coerce").fillna(0).astype("int64")
    if "param_estimate" not in df.columns:
        df["param_estimate"] = [estimate_params(c if isinstance(c, str) else None) for c in df["config"]]
    for t in traits:
        df[t] = df[t].fillna(UNKNOWN).astype(str)
    total_downloads = int(df["downloads"].sum())
    if df.empty:
        return Selection([], 0, 0, 0, 0, 0.0, 0.0, 0.0, 0)
    groups = _signature_groups(df, traits)
    records = groups[traits].to_dict("records")
    element_ids: dict[str, int] = {}
    sets: list[frozenset[int]] = []
    for rec in records:
        sets.append(frozenset(element_ids.setdefault(e, len(element_ids)) for e in elements_of(rec)))
    names = {i: e for e, i in element_ids.items()}
    dl = groups["downloads"].to_numpy(dtype=np.float64)
    size = groups["param_estimate"].to_numpy(dtype=np.float64)
    ids = groups["id"].astype(str).tolist()
    top = math.log1p(dl.max()) if len(dl) and dl.max() > 0 else 1.0
    cost = 2.0 - np.log1p(dl) / top

    chosen: list[int] = []
    first: dict[int, list[int]] = {}
    uncovered = set(range(len(element_ids)))
    heap = [(-len(s) / cost[i], -dl[i], size[i], ids[i], i) for i, s in enumerate(sets) if s]
    heapq.heapify(heap)
    while uncovered and heap:
        key = heapq.heappop(heap)
        i = key[-1]
        gain = sets[i] & uncovered
        if not gain:
            continue
        fresh = (-len(gain) / cost[i], -dl[i], size[i], ids[i], i)
        if fresh != key and heap and fresh > heap[0]:
            heapq.heappush(heap, fresh)  # lazy greedy: its gain shrank, re-rank it
            continue
        chosen.append(i)
        first[i] = sorted(gain)
        uncovered -= gain

    coverage_mask = np.zeros(len(groups), dtype=bool)
    coverage_mask[chosen] = True
    gdl = groups["group_downloads"].to_numpy(dtype=np.float64)
    if coverage_target is not None:  # add the most-downloaded uncovered signatures until the target
        order = sorted(
            (i for i in range(len(groups)) if not coverage_mask[i]), key=lambda i: (-gdl[i], ids[i])
        )
        for i in order:
            if total_downloads == 0 or gdl[coverage_mask].sum() / total_downloads >= coverage_target:
                break
            coverage_mask[i] = True
            chosen.append(i)
            first[i] = []

    assign = _assign_clusters(groups[traits].to_numpy(dtype=object), chosen)
    gmodels = groups["group_models"].to_numpy(dtype=np.int64)
    reps = []
    for slot, i in enumerate(chosen):
        members = assign == slot
        row = groups.iloc[i]
        reps.append(
            Representative(
                id=str(row["id"]),
                model_type=str(row.get("model_type") or row[traits[0]]),
                architecture=str(row.get("architecture") or ""),
                config=row["config"] if isinstance(row["config"], str) else "{}",
                downloads=int(row["downloads"]),
                covers=sorted(names[e] for e in sets[i]),
                first_covered=[names[e] for e in first[i]],
                cluster_download_share=float(gdl[members].sum() / total_downloads)
                if total_downloads
                else 0.0,
                cluster_models=int(gmodels[members].sum()),
                source=str(row.get("source") or ""),
                param_estimate=float(size[i]),
            )
        )
    exact_dl = float(gdl[coverage_mask].sum() / total_downloads) if total_downloads else 0.0
    exact_models = float(gmodels[coverage_mask].sum() / gmodels.sum())
    d = max((len(s) for s in sets), default=0)
    return Selection(
        representatives=reps,
        eligible=len(df),
        universe=len(element_ids),
        covered=len(element_ids) - len(uncovered),
        max_set_size=d,
        greedy_bound=harmonic(d),
        download_weighted_coverage=exact_dl,
        model_coverage=exact_models,
        total_downloads=total_downloads,
        stats={"signatures": len(groups)},
    )


def harmonic(n: int) -> float:
    return float(sum(1.0 / k for k in range(1, n + 1)))


def _assign_clusters(signatures: np.ndarray, chosen: Sequence[int]) -> np.ndarray:
    """Each signature's cluster: the representative sharing the most known trait values with it
    (ties: the earlier-chosen representative). Returns the slot in `chosen` per signature."""
    if not chosen:
        return np.full(len(signatures), -1)
    codes = np.empty(signatures.shape, dtype=np.int32)
    for j in range(signatures.shape[1]):
        _, inv = np.unique(signatures[:, j].astype(str), return_inverse=True)
        codes[:, j] = inv
    known = signatures.astype(str) != UNKNOWN
    reps = codes[list(chosen)]
    best = np.zeros(len(codes), dtype=np.int64)
    best_score = np.full(len(codes), -1, dtype=np.int64)
    for slot in range(len(chosen)):
        score = ((codes == reps[slot]) & known).sum(axis=1)
        better = score > best_score
        best[better] = slot
        best_score[better] = score[better]
    return best


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def write_selection(out_dir: str | Path, selection: Selection) -> Path:
    """representatives.parquet (+ the population summary in its metadata and selection.json)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    rows = [asdict(r) for r in selection.representatives]
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("model_type", pa.string()),
            ("architecture", pa.string()),
            ("config", pa.string()),
            ("downloads", pa.int64()),
            ("covers", pa.list_(pa.string())),
            ("first_covered", pa.list_(pa.string())),
            ("cluster_download_share", pa.float64()),
            ("cluster_models", pa.int64()),
            ("source", pa.string()),
            ("param_estimate", pa.float64()),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    summary = selection.summary()
    table = table.replace_schema_metadata({META_KEY: json.dumps(summary).encode()})
    path = out / REPRESENTATIVES_FILE
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    (out / SELECTION_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    return path


def read_representatives(out_dir: str | Path) -> pd.DataFrame:
    path = Path(out_dir)
    if path.is_dir():
        path = path / REPRESENTATIVES_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"no {REPRESENTATIVES_FILE} at {path.parent} (run `harness select --in {path.parent}`)"
        )
    return pd.read_parquet(path)


def _to_specs(rows: Iterable[Mapping[str, Any]]) -> list[ModelSpec]:
    """Representative rows -> ModelSpecs, through the store's one converter (ModelRecord.to_spec)."""
    specs = []
    for r in rows:
        config = r.get("config")
        record = ModelRecord(
            id=str(r["id"]),
            source=str(r.get("source") or "catalog"),
            model_type=r.get("model_type") or None,
            downloads=int(r.get("downloads") or 0),
            config=config if isinstance(config, str) else None,
        )
        specs.append(record.to_spec(architecture=str(r.get("architecture") or "")))
    return specs


def load_representatives(out_dir: str | Path) -> list[ModelSpec]:
    """The representatives `harness select` wrote into DIR, as ModelSpecs (selection order)."""
    return _to_specs(read_representatives(out_dir).to_dict("records"))


def default_representatives() -> list:
    """Representatives of the offline catalog (every architecture the installed transformers knows).
    The catalog has no downloads, so the choice falls to cover size, then parameters, then id.
    Building the catalog takes a while, so the result is cached on disk per transformers and
    trait-vocabulary version ($HARNESS_CACHE_DIR)."""
    return _to_specs(_default_rows())


def default_cache_path() -> Path:
    import transformers

    return (
        current().cache_dir
        / f"default_representatives-{transformers.__version__}-v{vocabulary().version}.json"
    )


def _default_rows() -> list[dict[str, Any]]:
    path = default_cache_path()
    try:
        rows = json.loads(path.read_text())
        if isinstance(rows, list) and rows and all(isinstance(r, dict) and "id" in r for r in rows):
            return rows
    except (OSError, ValueError):
        pass
    from agents.catalog import iter_catalog
    from agents.classify import traits_frame

    records = [asdict(r) for r in iter_catalog()]
    frame = traits_frame(pd.DataFrame.from_records(records), with_store_columns=True)
    keep = ("id", "model_type", "architecture", "config", "downloads", "source")
    rows = [{k: getattr(r, k) for k in keep} for r in select(frame).representatives]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        tmp.replace(path)
    except OSError:
        pass
    return rows
