"""Apply traits to a crawl store: DIR/models.parquet in, DIR/traits.parquet out.

Rules first (agents.traits); when an LLM endpoint is configured (agents.llm), models whose
model_type the installed transformers does not know get their unknown traits asked for, and an
answer is only used when it validates against the trait vocabulary (see agents.llm).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from agents.traits import TRAIT_NAMES, traits_dict_for_row
from agents.type_profiles import profiles
from agents.vocabulary import UNKNOWN

TRAITS_FILE = "traits.parquet"
STORE_COLUMNS = ("downloads", "config", "architecture", "source", "status", "broken_reason", "config_level")


def read_store_frame(directory: str | Path) -> pd.DataFrame:
    """The crawl store as a DataFrame (agents.store's reader: it checks the schema version)."""
    from agents.store import read_frame

    return read_frame(directory)


def _progress(iterable: Iterable, total: int, desc: str, enabled: bool) -> Iterable:
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="model", file=sys.stderr, mininterval=0.5)


def traits_frame(
    store: pd.DataFrame,
    *,
    with_store_columns: bool = False,
    progress: bool = False,
    llm_fill: Callable[[dict[str, Any], dict[str, str]], dict[str, str]] | None = None,
) -> pd.DataFrame:
    """One row per store row: id + every trait column (+ the store columns selection needs).

    `llm_fill(row, traits) -> traits` may replace unknown values (agents.llm_traits.LLMClassifier.fill)."""
    n = len(store)
    wanted = ("id", "model_type", "architectures", "config", "config_level", "head", "card", *STORE_COLUMNS)
    columns = {
        c: store[c].tolist() for c in dict.fromkeys(wanted) if c in store.columns
    }  # fast, no per-row pandas
    out: list[dict[str, Any]] = []
    filled_by: list[list[str]] = []
    for i in _progress(range(n), n, "traits", progress):
        row = {c: values[i] for c, values in columns.items()}
        traits = traits_dict_for_row(row)
        changed: list[str] = []
        if llm_fill is not None and UNKNOWN in traits.values() and _type_unknown(traits["model_type"]):
            new = llm_fill(row, traits)
            changed = [k for k in TRAIT_NAMES if new.get(k) != traits[k]]
            traits = new
        rec = {"id": row["id"], **traits}
        if with_store_columns:
            archs = row.get("architectures")
            rec["architecture"] = str(archs[0]) if archs is not None and len(archs) else ""
            for col in ("downloads", "config", "source", "status", "broken_reason", "config_level"):
                rec[col] = row.get(col)
        out.append(rec)
        filled_by.append(changed)
    profiles().save()
    frame = pd.DataFrame.from_records(
        out, columns=["id", *TRAIT_NAMES] + (list(STORE_COLUMNS) if with_store_columns else [])
    )
    if llm_fill is not None:
        frame["filled_by_llm"] = filled_by
    return frame


def _type_unknown(model_type: str) -> bool:
    """A named model_type the installed transformers does not know (no name: nothing to ask about)."""
    return model_type != UNKNOWN and not profiles().get(model_type).known


def classify_store(
    directory: str | Path, *, progress: bool = False, llm_fill=None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Classify DIR/models.parquet, write DIR/traits.parquet; returns (frame with store columns, summary)."""
    directory = Path(directory)
    store = read_store_frame(directory)
    frame = traits_frame(store, with_store_columns=True, progress=progress, llm_fill=llm_fill)
    out_cols = ["id", *TRAIT_NAMES, "status"] + (
        ["filled_by_llm"] if "filled_by_llm" in frame.columns else []
    )
    tmp = directory / (TRAITS_FILE + ".tmp")
    frame[out_cols].to_parquet(tmp, index=False)
    tmp.replace(directory / TRAITS_FILE)
    return frame, population_summary(frame)


def population_summary(frame: pd.DataFrame) -> dict[str, Any]:
    """Population, broken by reason, and the trait values found (with how many rows are unknown)."""
    status = frame["status"].fillna("ok") if "status" in frame.columns else pd.Series(["ok"] * len(frame))
    broken = (
        frame.loc[status != "ok", "broken_reason"].fillna("unspecified")
        if "broken_reason" in frame.columns
        else []
    )
    values: dict[str, Any] = {}
    ok = frame[status == "ok"]
    for t in TRAIT_NAMES:
        counts = Counter(ok[t].fillna(UNKNOWN))
        unknown = counts.pop(UNKNOWN, 0)
        values[t] = {
            "values": len(counts),
            "unknown": int(unknown),
            "top": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8]),
        }
    return {
        "population": len(frame),
        "ok": int((status == "ok").sum()),
        "broken": int((status != "ok").sum()),
        "broken_by_reason": dict(sorted(Counter(broken).items(), key=lambda kv: (-kv[1], kv[0]))),
        "trait_values": values,
    }
