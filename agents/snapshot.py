"""Snapshot source: a JSONL(.gz) or Parquet dump of Hub metadata, triaged into crawl-store records.

A dump row has the Hub listing fields (id, downloads, likes, pipeline_tag, library_name, tags) and
optionally model_type, architectures, config (dict or JSON text) and config_level. Rows are read
streaming; a row that is not a JSON object with an id is kept as a broken record
(``unreadable_row``) under a synthetic id, so nothing is lost silently.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agents.store import CONFIG_LEVELS, ModelRecord
from agents.triage import triage

_MISSING = {"", "<NA>", "nan", "NaN", "None", "null"}


def iter_rows(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(row number, parsed row or the raw text when it is not JSON) for a .jsonl[.gz] or .parquet file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"snapshot {path} does not exist")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        n = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                n += 1
                yield n, row
        return
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as raw:
        for n, line in enumerate(io.TextIOWrapper(raw, encoding="utf-8", errors="replace"), start=1):
            line = line.strip()
            if not line:
                continue
            try:
                yield n, json.loads(line)
            except ValueError:
                yield n, line


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    value = str(value)
    return None if value in _MISSING else value


def _int(value: Any) -> int | None:
    try:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        return int(value)
    except (TypeError, ValueError):
        return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
    if not isinstance(value, (list, tuple)):
        return []
    return [str(v) for v in value if v is not None]


def record_from_row(row: Any, lineno: int, origin: str, *, instantiate: bool = True) -> ModelRecord:
    """One dump row -> one triaged ModelRecord (never raises on bad data)."""
    if not isinstance(row, dict) or not _text(row.get("id")):
        return ModelRecord(
            id=f"{origin}:{lineno}",
            source="snapshot",
            status="broken",
            broken_reason="unreadable_row",
            broken_detail=f"row {lineno} is not a JSON object with an id: {str(row)[:200]}",
        )
    raw_config = row.get("config")
    if isinstance(raw_config, (dict, list)):
        config_text = json.dumps(raw_config)
    else:
        config_text = _text(raw_config)
    level = _text(row.get("config_level"))
    model_id = _text(row["id"])
    tags = _strings(row.get("tags"))
    decision = triage(
        model_id,
        raw_config if isinstance(raw_config, (dict, list)) else config_text,
        model_type=_text(row.get("model_type")),
        architectures=_strings(row.get("architectures")),
        tags=tags,
        instantiate=instantiate,
    )
    return ModelRecord(
        id=model_id,
        source="snapshot",
        downloads=_int(row.get("downloads")),
        likes=_int(row.get("likes")),
        pipeline_tag=_text(row.get("pipeline_tag")),
        library_name=_text(row.get("library_name")),
        tags=tags,
        sha=_text(row.get("sha")),
        model_type=decision.model_type,
        architectures=decision.architectures,
        config=config_text,
        config_level=level if level in CONFIG_LEVELS else None,
        status=decision.status,
        broken_reason=decision.reason,
        broken_detail=decision.detail,
        downloads_snapshot=_text(row.get("downloads_snapshot")),
        config_source=_text(row.get("config_source")),
        last_modified=_text(row.get("last_modified") or row.get("lastModified")),
    )


def iter_snapshot(
    path: str | Path, *, limit: int | None = None, instantiate: bool = True
) -> Iterator[ModelRecord]:
    """Triaged records of a dump, in file order; `limit` caps how many rows are read."""
    origin = Path(path).name
    for count, (lineno, row) in enumerate(iter_rows(path), start=1):
        if limit is not None and count > limit:
            return
        yield record_from_row(row, lineno, origin, instantiate=instantiate)
