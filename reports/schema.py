"""The documented, versioned schema of the four report tables: the ONE place that defines them.

Every run directory holds four Parquet files, long format, plain Arrow types (string, int64,
float64, bool, timestamp, list<string>) so pandas, DuckDB and polars read them without the
harness installed:

    runs.parquet       one row per run: what ran, where, with which versions
    results.parquet    one row per (tier, case, stage): the outcome, with its reason and metrics
    fallbacks.parquet  one row per (case, op, shapes/dtypes, reason, frame): CPU fallback events
    per_op.parquet     one row per (tier, op): native and fallback calls, models / downloads blocked;
                       for the upstream tier also one row per (OpInfo, dtype): native / fallback /
                       failing samples

The columns of results and fallbacks are the fields of contracts.records.ResultRow and FallbackRow
(one definition, with each column's documentation); runs and per_op are the report's own tables.

The schema version is stored in each file's Parquet key-value metadata (key ``harness.schema_version``)
and as the ``schema_version`` column of ``runs``. Bump ``SCHEMA_VERSION`` when a column changes
meaning or type or is removed; adding a nullable column is compatible and keeps the version.

A full-tier case stands for every model whose shrunk config is identical: a ``results`` row keeps
the case once, with ``model_ids`` (every model the outcome is attributed to), ``n_models`` and
``weight`` (their summed downloads). Model-level counts sum ``n_models``; weighted figures sum
``weight``; exploding ``model_ids`` gives one row per model when a tool wants it.

Usage::

    from reports.schema import RESULTS, column_names
    column_names(RESULTS)  # ['run_id', 'tier', 'case_id', 'stage', 'status', ...]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow as pa

from contracts.records import FallbackRow, ResultRow

SCHEMA_VERSION = 1
#: Parquet key-value metadata keys written into every table file.
META_SCHEMA_VERSION = b"harness.schema_version"
META_TABLE = b"harness.table"

_LIST_STR = pa.list_(pa.string())
_TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    required: bool = False  # a row without it is a bug in the writer: rejected with a clear error


@dataclass(frozen=True)
class Table:
    name: str  # file stem: <name>.parquet
    doc: str
    columns: tuple[Column, ...]

    @property
    def arrow_schema(self) -> pa.Schema:
        fields = [pa.field(c.name, c.type, nullable=not c.required) for c in self.columns]
        return pa.schema(
            fields,
            metadata={META_SCHEMA_VERSION: str(SCHEMA_VERSION).encode(), META_TABLE: self.name.encode()},
        )


_ARROW_TYPES: dict[str, pa.DataType] = {
    "str": pa.string(),
    "str | None": pa.string(),
    "int | None": pa.int64(),
    "float | None": pa.float64(),
    "list[str]": _LIST_STR,
    "bool | None": pa.bool_(),
}


def table_of(name: str, doc: str, record: type) -> Table:
    """The table whose columns are the fields of a contracts.records row record, in order."""
    columns = []
    for f in dataclasses.fields(record):
        if f.type not in _ARROW_TYPES:
            raise TypeError(f"{record.__name__}.{f.name}: no Arrow type for {f.type!r}")
        columns.append(Column(f.name, _ARROW_TYPES[f.type], f.metadata["doc"], f.metadata["required"]))
    return Table(name, doc, tuple(columns))


RUNS = Table(
    "runs",
    "One row per run: what ran, where, with which versions.",
    (
        Column("run_id", pa.string(), "Unique id of the run (also the key in the other tables).", True),
        Column(
            "schema_version",
            pa.int64(),
            "Version of this table schema (reports.schema.SCHEMA_VERSION).",
            True,
        ),
        Column("started_at", _TS, "When the run started (UTC)."),
        Column("finished_at", _TS, "When the tables were written (UTC)."),
        Column("duration_seconds", pa.float64(), "Wall time of the run."),
        Column("git_commit", pa.string(), "Commit of the harness checkout, null outside git."),
        Column("harness_version", pa.string(), "Version of the harness package."),
        Column("torch_version", pa.string(), "torch.__version__."),
        Column("transformers_version", pa.string(), "transformers.__version__."),
        Column("backend", pa.string(), "Backend name as given (neuron, cpu, cuda, MODULE:DEVICE)."),
        Column(
            "lowering_table_version",
            pa.string(),
            "Version of the backend's lowering table, null if it has none.",
        ),
        Column(
            "backend_kind",
            pa.string(),
            "simulated, real, or unknown (the adapter's `simulated`), null when no worker resolved it.",
        ),
        Column(
            "backend_versions",
            pa.string(),
            "JSON object {component: version} from the adapter's describe(): what was tested "
            "(e.g. torchax, jax; the simulator's lowering table), null when unknown.",
        ),
        Column(
            "backend_settings",
            pa.string(),
            "JSON object of the backend settings describe() reports (precision, fallback mode, "
            "JAX's 64-bit mode, ...), null when unknown.",
        ),
        Column(
            "tiers",
            _LIST_STR,
            "Tiers the run covers (unit, representative, full, upstream, or a tier of its own).",
        ),
        Column("shard", pa.string(), "Shard I/N of a CI matrix run, null when unsharded."),
        Column("host", pa.string(), "Machine the run ran on."),
        Column("extra", pa.string(), "JSON object of any other run metadata the runner recorded."),
    ),
)

RESULTS = table_of(
    "results", "One row per case and stage: the outcome with its reason and metrics.", ResultRow
)
FALLBACKS = table_of(
    "fallbacks", "One row per CPU fallback event group: which op fell back, where and why.", FallbackRow
)

PER_OP = Table(
    "per_op",
    "One row per (tier, op): how often it ran natively or fell back, and what it blocks.",
    (
        Column("run_id", pa.string(), "Run this row belongs to.", True),
        Column("tier", pa.string(), "Tier the figures are for (denominators differ per tier).", True),
        Column("op", pa.string(), "Op overload.", True),
        Column(
            "native_calls",
            pa.int64(),
            "Calls executed on the device, null when the runner did not count them.",
        ),
        Column("fallback_calls", pa.int64(), "Calls that fell back to the CPU."),
        Column(
            "cases_blocked", pa.int64(), "Cases in which the op fell back (they do not run fully on device)."
        ),
        Column("models_blocked", pa.int64(), "Models (summing n_models of those cases) the op blocks."),
        Column(
            "download_share_blocked",
            pa.float64(),
            "Summed downloads of those models / summed downloads "
            "of all models of the tier (null when the tier has no weight).",
        ),
        Column("models_total", pa.int64(), "Denominator: models of the tier."),
        Column("weight_total", pa.float64(), "Denominator: summed downloads of the tier's models."),
        Column(
            "dtype",
            pa.string(),
            "Upstream tier: the dtype of an OpInfo row (op is then the OpInfo name, not an "
            "op overload); null on op-overload rows.",
        ),
        Column(
            "variant",
            pa.string(),
            'Upstream tier: the OpInfo variant of an OpInfo row ("" for the op itself).',
        ),
        Column(
            "cases_native",
            pa.int64(),
            "Upstream OpInfo rows: samples that passed on the device with no fallback.",
        ),
        Column(
            "cases_fallback",
            pa.int64(),
            "Upstream OpInfo rows: samples that matched only through a CPU fallback (no-native-lowering).",
        ),
        Column(
            "cases_failed",
            pa.int64(),
            "Upstream OpInfo rows: samples with a failing stage (fail, error, timeout, oom, crash).",
        ),
        Column(
            "cases_skipped",
            pa.int64(),
            "Upstream OpInfo rows: samples skipped for another reason (PyTorch's "
            "applicability, backend-unsupported, reference-error).",
        ),
    ),
)

TABLES: dict[str, Table] = {t.name: t for t in (RUNS, RESULTS, FALLBACKS, PER_OP)}


def column_names(table: Table) -> list[str]:
    return [c.name for c in table.columns]


def required_columns(table: Table) -> list[str]:
    return [c.name for c in table.columns if c.required]
