"""The typed records that cross package boundaries.

    ModelSpec     one model to check (agents -> harness; registry records from it too)
    Case          one unit of work of a tier, as the runner schedules it
    StageResult   how one stage of one case ended (a Status with its reason and metrics)
    ModelCheck    one model checked stage by stage (harness.stages.check -> tiers, `harness check --json`)
    CaseOutcome   everything a worker reports about one case (journaled as JSON)
    ResultRow     one row of results.parquet: reports.schema derives the RESULTS table from it
    FallbackRow   one row of fallbacks.parquet: reports.schema derives the FALLBACKS table from it

ResultRow and FallbackRow are the one definition of their tables' columns: each field's metadata
holds its documentation and whether a row without it is rejected. Adding a field (nullable) adds
a column and keeps reports.schema.SCHEMA_VERSION; changing or removing one bumps it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from contracts.status import NEEDS_REASON, Blame, Status, headline_status

# ------------------------------------------------------------------------------------- inputs


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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelSpec:
        """From a dict with (at least) model_id/model_type; unknown keys are ignored."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Case:
    """One unit of work of a tier, as the runner schedules it (JSON-able payload, picklable).

    A full-tier case stands for every model whose shrunk config is identical: `model_ids` lists
    them and `weight` is their summed downloads, so the outcome is attributed to each.
    """

    case_id: str
    tier: str  # unit | representative | full | upstream | a plug-in's name
    payload: dict[str, Any] = field(default_factory=dict)
    model_ids: list[str] = field(default_factory=list)
    weight: float = 0.0

    @classmethod
    def for_spec(
        cls,
        spec: ModelSpec,
        tier: str,
        case_id: str | None = None,
        model_ids: list[str] | None = None,
        weight: float | None = None,
        info: dict[str, Any] | None = None,
    ) -> Case:
        """A model case: the spec rides in the payload (`payload["spec"]`), `info` labels its rows."""
        payload: dict[str, Any] = {"spec": asdict(spec)}
        if info:
            payload["info"] = info
        return cls(
            case_id=case_id or spec.model_id,
            tier=tier,
            payload=payload,
            model_ids=model_ids if model_ids is not None else [spec.model_id],
            weight=float(spec.downloads if weight is None else weight),
        )

    def spec(self) -> ModelSpec:
        """The ModelSpec of a model case (see `for_spec`)."""
        return ModelSpec.from_dict(self.payload["spec"])


# ------------------------------------------------------------------------------------ results


@dataclass
class StageResult:
    stage: str
    status: Status
    reason: str = ""  # why skipped / not attempted / failed, short and stable
    error_class: str = ""  # exception type, e.g. "RuntimeError"
    message: str = ""  # normalized error message (no addresses, no temp paths)
    failing_op: str = ""  # aten op that raised, where known
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    blame: str = (
        ""  # whose failure a stage that did not pass is: a contracts.status.Blame value ("" = not judged)
    )
    blame_evidence: dict[str, Any] = field(default_factory=dict)  # what the blame was decided from
    # where a backend failure comes from: contracts.rootcause.RootCause.to_dict() ({} = not localized)
    root_cause: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        if self.status in NEEDS_REASON and not self.reason:
            raise ValueError(f"stage {self.stage!r}: status {self.status.value} needs a reason")
        if self.blame:
            self.blame = Blame(self.blame).value

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


@dataclass
class ModelCheck:
    """The result of checking one model on one backend, stage by stage."""

    model_id: str
    backend: str
    stages: dict[str, StageResult] = field(default_factory=dict)
    model_type: str = ""
    architecture: str = ""  # transformers class name, e.g. "BertForMaskedLM"
    parameters: int = 0
    # null: the backend cannot report it (fallbacks), or the stage that counts it did not run (graphs)
    fallback_count: int | None = None
    fallback_ops: list[str] | None = None  # distinct op overloads that fell back
    fallback_events: list[dict[str, Any]] = field(default_factory=list)
    graphs: int | None = None
    recompiles: int | None = None
    peak_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stages"] = {name: r.to_dict() for name, r in self.stages.items()}
        return d


@dataclass
class CaseOutcome:
    """Everything a worker reports about one case: JSON-able, journaled as is."""

    case_id: str
    tier: str
    stages: list[dict[str, Any]]  # StageResult.to_dict() each, in stage order
    model_ids: list[str] = field(default_factory=list)
    weight: float = 0.0
    fallback_count: int | None = None
    fallback_ops: list[str] = field(default_factory=list)
    fallback_events: list[dict[str, Any]] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)  # model_type, architecture, traits, parameters...
    worker: dict[str, Any] = field(default_factory=dict)  # pid, attempts, how the worker ended

    @property
    def status(self) -> str:
        """The case's headline status (contracts.status.headline_status of its stages)."""
        return headline_status(s["status"] for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaseOutcome:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


# ------------------------------------------------------------------------------------- tables


def _doc(doc: str, required: bool = False) -> dict[str, Any]:
    """A table column's documentation, in its field's metadata (reports.schema reads it)."""
    return {"doc": doc, "required": required}


def _col(doc: str, required: bool = False, default: Any = None) -> Any:
    """A table column with an immutable default (a list column: `field(default_factory=list,
    metadata=_doc(...))`, so each row gets its own)."""
    return field(default=default, metadata=_doc(doc, required))


@dataclass(frozen=True)
class ResultRow:
    """One row of results.parquet: one (tier, case, stage) with its outcome.

    JSON columns (traits, metrics, extra, blame_evidence, root_cause) hold a JSON object as text."""

    run_id: str = _col("Run this row belongs to (runs.run_id).", True)
    tier: str = _col("unit | representative | full | upstream (or a plug-in tier's name).", True)
    case_id: str = _col("Stable id of the tier case (the comparison key with tier and stage).", True)
    stage: str = _col(
        "Stage checked: load, forward, backward, compile, numerics, on_device (model tiers) or "
        "the unit tier's stage name.",
        True,
    )
    status: str = _col(
        "One of contracts.status.Status: pass, fail, error, timeout, oom, crash, skipped, not_attempted.",
        True,
    )
    reason: str | None = _col("Why skipped / not attempted / failed: short and stable.")
    error_class: str | None = _col("Exception type, e.g. RuntimeError; for crash the signal name.")
    message: str | None = _col("Normalized error message (no addresses, no temp paths).")
    failing_op: str | None = _col("ATen op that raised, where known.")
    model_id: str | None = _col(
        "Model the case was built from (the group's first model); null for unit cases."
    )
    model_ids: list[str] = field(
        default_factory=list,
        metadata=_doc(
            "Every model the outcome is attributed to (a deduplicated full-tier case stands "
            "for several); empty for unit cases."
        ),
    )
    n_models: int | None = _col("len(model_ids): sum it for model-level counts.")
    weight: float | None = _col("Summed downloads of model_ids: sum it for download-weighted coverage.")
    seconds: float | None = _col("Wall time of the stage.")
    fallback_count: int | None = _col("CPU fallback calls seen in the stage (null: backend cannot report).")
    fallback_ops: list[str] = field(
        default_factory=list, metadata=_doc("Distinct op overloads that fell back to the CPU.")
    )
    graphs: int | None = _col("Compiled graphs (compile counts), null when not compiled.")
    recompiles: int | None = _col("Recompilations, null when not compiled.")
    peak_memory_bytes: int | None = _col("Peak device memory of the case, null when unknown.")
    traits: str | None = _col(
        'JSON object of the model\'s traits (e.g. {"modality": "text"}); DuckDB: '
        "json_extract_string(traits, '$.modality')."
    )
    metrics: str | None = _col("JSON object of other stage metrics (e.g. max_abs_error).")
    extra: str | None = _col("JSON object of any other fields the runner recorded for the row.")
    blame: str | None = _col(
        "Whose failure a failing row is: one of contracts.status.Blame (backend, upstream, "
        "environment, harness); null when not judged."
    )
    blame_evidence: str | None = _col(
        "JSON object: what the blame was decided from (e.g. the same case on the CPU)."
    )
    op: str | None = _col("Upstream tier: the op (OpInfo name) the sample exercises; null elsewhere.")
    dtype: str | None = _col("Upstream tier: the sample's dtype, e.g. float32; null elsewhere.")
    variant: str | None = _col('Upstream tier: the OpInfo variant ("" for the op itself); null elsewhere.')
    sample: int | None = _col("Upstream tier: index of the sample input of the op and dtype; null elsewhere.")
    root_cause_op: str | None = _col(
        "The aten overload a backend failure was localized to (e.g. aten.gelu.default); null when the "
        "row was not localized or no call was found."
    )
    root_cause: str | None = _col(
        "JSON object: the root-cause record (contracts.rootcause.RootCause: op, phase, kind, route, call "
        "index, input shapes/dtypes/strides, mismatch, module path, source line, repro and repro_verified), "
        "or why none was found; null when not localized."
    )


@dataclass(frozen=True)
class FallbackRow:
    """One row of fallbacks.parquet: a group of CPU fallback events of one case."""

    run_id: str = _col("Run this row belongs to.", True)
    tier: str | None = _col("Tier of the case, null when the event names no case the run knows.")
    case_id: str | None = _col("Case the event was seen in, null when unknown.")
    model_id: str | None = _col("Model the event was seen in.")
    op: str = _col("Op overload that fell back, e.g. aten::_cdist_forward.", True)
    input_shapes: str | None = _col("Input shapes as text, e.g. [[2, 3], [3]].")
    input_dtypes: str | None = _col("Input dtypes as text, e.g. [float32, float32].")
    reason: str | None = _col("Why it fell back (no lowering, dtype, dynamic shape, ...).")
    count: int | None = _col("Calls in this group.")
    frame: str | None = _col("Source frame that issued the op (file:line in function), where known.")
    model_frame: str | None = _col(
        "The first frame in the model's own code (its modeling file) that led to the op, where known."
    )


def column_names(record: type) -> list[str]:
    """The column names of a table record (ResultRow, FallbackRow), in order."""
    return list(record.__dataclass_fields__)
