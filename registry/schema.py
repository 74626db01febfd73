"""Record types of the registry and its Parquet schema (one row per distinct op call signature).

``SCHEMA_VERSION`` is written into every file's metadata; loading a file of another version
fails with a message naming both versions instead of misreading columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from registry.encoding import case_id, signature_hash

SCHEMA_VERSION = 1
METADATA_KEY = b"harness.registry.schema_version"

PROVENANCE_TYPE = pa.struct(
    [
        ("model", pa.string()),  # model id (or the op-log file name for imports)
        ("tier", pa.string()),  # representative | full | oplog | manual
        ("phase", pa.string()),  # forward | backward | optimizer | inference | oplog
        ("mode", pa.string()),  # fake | real | oplog: how the call was observed
        ("weight", pa.float64()),  # the model's download weight
        ("count", pa.int64()),  # calls of this signature in that model/phase
    ]
)

#: Column -> (arrow type, meaning). Derived columns (count, weight, models, phases) are kept so
#: the file is useful to pandas/DuckDB without the harness; they are recomputed on load.
COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "op": (pa.string(), "aten overload, e.g. aten.addmm.default"),
    "sig_hash": (pa.string(), "12 hex of sha1(op|signature)"),
    "case_id": (pa.string(), "stable test id: op-sig_hash"),
    "signature": (pa.string(), "canonical JSON of encoded args and kwargs"),
    "constraints": (pa.string(), "JSON {arg path: value constraint}"),
    "outputs": (pa.string(), "JSON list of encoded outputs (shapes, dtypes), [] when unknown"),
    "count": (pa.int64(), "total calls over all provenance entries"),
    "weight": (pa.float64(), "summed download weight of the distinct models that made the call"),
    "models": (pa.list_(pa.string()), "distinct model ids, sorted"),
    "phases": (pa.list_(pa.string()), "distinct phases, sorted"),
    "provenance": (pa.list_(PROVENANCE_TYPE), "who made the call, how, how often"),
    "repro": (
        pa.string(),
        "JSON list, [] unless the entry reproduces a root cause: per root cause the run, case, "
        "tier, model, backend, phase, kind and why it is verified (harness registry add-repros)",
    ),
}
#: columns a file of this schema version may lack (written before they existed): read as empty
OPTIONAL_COLUMNS = frozenset({"repro"})
ARROW_SCHEMA = pa.schema([(name, typ) for name, (typ, _) in COLUMNS.items()])


@dataclass(frozen=True)
class Provenance:
    model: str
    tier: str
    phase: str
    mode: str
    weight: float = 0.0
    count: int = 1

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.model, self.tier, self.phase, self.mode)


@dataclass
class Entry:
    """One distinct (op, signature) with everything needed to replay it and say who uses it."""

    op: str
    signature: str
    constraints: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: list[Any] = field(default_factory=list)
    provenance: list[Provenance] = field(default_factory=list)
    repro: list[dict[str, Any]] = field(default_factory=list)  # the root causes it reproduces

    @property
    def key(self) -> tuple[str, str]:
        return (self.op, self.sig_hash)

    @property
    def sig_hash(self) -> str:
        return signature_hash(self.op, self.signature)

    @property
    def case_id(self) -> str:
        return case_id(self.op, self.signature)

    @property
    def count(self) -> int:
        return sum(p.count for p in self.provenance)

    @property
    def models(self) -> list[str]:
        return sorted({p.model for p in self.provenance})

    @property
    def phases(self) -> list[str]:
        return sorted({p.phase for p in self.provenance})

    @property
    def weight(self) -> float:
        per_model: dict[str, float] = {}
        for p in self.provenance:
            per_model[p.model] = max(per_model.get(p.model, 0.0), p.weight)
        return float(sum(per_model[m] for m in sorted(per_model)))

    def to_row(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "sig_hash": self.sig_hash,
            "case_id": self.case_id,
            "signature": self.signature,
            "constraints": json.dumps(self.constraints, sort_keys=True, separators=(",", ":")),
            "outputs": json.dumps(self.outputs, sort_keys=True, separators=(",", ":")),
            "count": self.count,
            "weight": self.weight,
            "models": self.models,
            "phases": self.phases,
            "provenance": [vars(p) | {} for p in self.provenance],
            "repro": json.dumps(self.repro, sort_keys=True, separators=(",", ":")),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Entry:
        return cls(
            op=row["op"],
            signature=row["signature"],
            constraints=json.loads(row["constraints"] or "{}"),
            outputs=json.loads(row["outputs"] or "[]"),
            provenance=[Provenance(**p) for p in row["provenance"] or []],
            repro=json.loads(row.get("repro") or "[]"),
        )
