"""The crawl store: one Parquet file, `models.parquet`, one row per model seen by any source.

Every source (Hub crawl, offline catalog, snapshot dump) writes the same schema so that traits,
selection and the runner read one thing. The schema version travels in the Parquet metadata
(key ``harness.store.schema_version``); a reader refuses a newer major version with a clear error.
Writes are atomic (temp file + rename) so a killed crawl never leaves a half-written store.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from contracts.records import ModelSpec

SCHEMA_VERSION = "1.0"
STORE_FILE = "models.parquet"
META_VERSION_KEY = b"harness.store.schema_version"
META_SOURCE_KEY = b"harness.store.sources"

SOURCES = ("hub", "catalog", "snapshot")
CONFIG_LEVELS = ("full", "partial", "arch_only", "default")
STATUSES = ("ok", "broken")

SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("downloads", pa.int64()),
        pa.field("likes", pa.int64()),
        pa.field("pipeline_tag", pa.string()),
        pa.field("library_name", pa.string()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("sha", pa.string()),
        pa.field("model_type", pa.string()),
        pa.field("architectures", pa.list_(pa.string())),
        pa.field("config", pa.string()),  # JSON text of config.json (or what the source had)
        pa.field("config_level", pa.string()),  # full | partial | arch_only | default | null
        pa.field("status", pa.string(), nullable=False),  # ok | broken
        pa.field("broken_reason", pa.string()),  # a reason code from agents/triage_rules.yaml
        pa.field("broken_detail", pa.string()),
        # Extras (nullable; sources fill what they know):
        pa.field("is_base", pa.bool_()),  # catalog: this row is the type's MODEL_MAPPING class
        pa.field("head", pa.string()),  # catalog: head mapping, e.g. "causal_lm"; hub: null
        pa.field("downloads_snapshot", pa.string()),  # snapshot: which listing `downloads` is from
        pa.field("config_source", pa.string()),  # snapshot: where the config came from
        pa.field("last_modified", pa.string()),  # hub: ISO timestamp
    ],
    metadata={META_VERSION_KEY: SCHEMA_VERSION.encode()},
)


@dataclass
class ModelRecord:
    """One model as a source saw it, plus the triage verdict (status/broken_reason)."""

    id: str
    source: str
    downloads: int | None = None
    likes: int | None = None
    pipeline_tag: str | None = None
    library_name: str | None = None
    tags: list[str] = field(default_factory=list)
    sha: str | None = None
    model_type: str | None = None
    architectures: list[str] = field(default_factory=list)
    config: str | None = None
    config_level: str | None = None
    status: str = "ok"
    broken_reason: str | None = None
    broken_detail: str = ""
    is_base: bool | None = None
    head: str | None = None
    downloads_snapshot: str | None = None
    config_source: str | None = None
    last_modified: str | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.config_level is not None and self.config_level not in CONFIG_LEVELS:
            raise ValueError(
                f"config_level must be one of {CONFIG_LEVELS} or None, got {self.config_level!r}"
            )
        if self.status == "broken" and not self.broken_reason:
            raise ValueError(f"{self.id}: a broken record needs a broken_reason")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def config_dict(self) -> dict[str, Any] | None:
        """The config as a dict, or None when absent or not a JSON object."""
        if not self.config:
            return None
        try:
            value = json.loads(self.config)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else ""

    def to_spec(self, architecture: str = "") -> ModelSpec:
        """The ModelSpec to check this model (only meaningful for status ok): the one record ->
        spec converter. model_type and architecture fall back to the config's own keys;
        `architecture` overrides the record's (e.g. `harness check --architecture`)."""
        config = self.config_dict() or {}
        archs = self.architectures or config.get("architectures") or []
        first = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
        model_type = self.model_type or str(config.get("model_type") or "")
        if self.config_level == "partial":  # a dump's size summary, not a config.json
            from agents.partial_config import normalize_partial

            config = normalize_partial(config, model_type)
        return ModelSpec(
            model_id=self.id,
            model_type=model_type,
            architecture=architecture or first,
            config=config,
            downloads=int(self.downloads or 0),
            source=self.source,
        )


COLUMNS = [f.name for f in fields(ModelRecord)]
assert SCHEMA.names == COLUMNS, "ModelRecord fields and the Parquet SCHEMA must agree"


def store_path(out_dir: str | os.PathLike) -> Path:
    return Path(out_dir) / STORE_FILE


def records_to_table(records: Iterable[ModelRecord]) -> pa.Table:
    rows = [asdict(r) for r in records]
    columns = {name: [row[name] for row in rows] for name in COLUMNS}
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def table_to_records(table: pa.Table) -> list[ModelRecord]:
    table = _conform(table)
    out = []
    for row in table.to_pylist():
        row["tags"] = list(row["tags"] or [])
        row["architectures"] = list(row["architectures"] or [])
        row["broken_detail"] = row["broken_detail"] or ""
        out.append(ModelRecord(**row))
    return out


def write_table(path: str | os.PathLike, table: pa.Table, sources: Iterable[str] = ()) -> Path:
    """Atomically write `table` (already in SCHEMA) to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(SCHEMA.metadata)
    meta[META_SOURCE_KEY] = ",".join(sorted(set(sources))).encode()
    table = table.replace_schema_metadata(meta)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_store(out_dir: str | os.PathLike, records: Iterable[ModelRecord]) -> Path:
    """Write records to DIR/models.parquet atomically; returns the file path."""
    records = list(records)
    return write_table(store_path(out_dir), records_to_table(records), {r.source for r in records})


def read_table(out_dir_or_file: str | os.PathLike) -> pa.Table:
    """The store as an Arrow table (accepts the directory or the .parquet file itself)."""
    path = Path(out_dir_or_file)
    if path.is_dir():
        path = path / STORE_FILE
    if not path.exists():
        raise FileNotFoundError(f"no crawl store at {path} (run `harness crawl --out {path.parent}`)")
    table = pq.read_table(path)
    version = (table.schema.metadata or {}).get(META_VERSION_KEY, b"").decode() or "?"
    if version == "?" or version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise ValueError(f"{path}: store schema version {version}, this harness reads {SCHEMA_VERSION}")
    return _conform(table)


def read_store(out_dir_or_file: str | os.PathLike) -> list[ModelRecord]:
    """Every record of the store, in file order."""
    return table_to_records(read_table(out_dir_or_file))


def read_frame(out_dir_or_file: str | os.PathLike):
    """The store as a pandas DataFrame (list columns stay Python lists)."""
    return read_table(out_dir_or_file).to_pandas()


def _conform(table: pa.Table) -> pa.Table:
    """Add columns missing from an older minor version (as nulls) and order columns as SCHEMA."""
    cols = []
    for f in SCHEMA:
        if f.name in table.column_names:
            cols.append(table.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=SCHEMA)
