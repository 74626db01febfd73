"""The registry as a Parquet file: load, save, merge, dedupe, diff.

Rows are kept sorted by (op, sig_hash) and provenance by (model, tier, phase, mode), so saving the
same content twice gives the same file and ``load(save(r)) == r`` exactly. Merging is
commutative and idempotent: rows with the same (op, signature) combine; provenance entries with
the same key keep the larger count (re-recording a model does not double its calls).

    reg = Registry.load("ops.parquet")
    reg.merge(Registry.load("other.parquet"))
    reg.save("ops.parquet")
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from registry.errors import RegistryFormatError
from registry.schema import ARROW_SCHEMA, METADATA_KEY, OPTIONAL_COLUMNS, SCHEMA_VERSION, Entry, Provenance


def _rank(c: dict) -> int:
    """Which constraint of a path wins a merge: a repro's concrete values (the values the failing
    call was given), then the op's semantics, then observation."""
    return 2 if c.get("kind") == "values" else 1 if c.get("source") == "semantics" else 0


def _merge_constraints(a: dict, b: dict) -> dict:
    out = dict(a)
    for path, c in b.items():
        old = out.get(path)
        if old is None:
            out[path] = c
        elif _rank(old) != _rank(c):
            out[path] = old if _rank(old) > _rank(c) else c
        else:  # same rank: a deterministic choice, so merge order does not matter
            out[path] = min(old, c, key=lambda x: json.dumps(x, sort_keys=True))
    return dict(sorted(out.items()))


def merge_entries(a: Entry, b: Entry) -> Entry:
    prov: dict[tuple, Provenance] = {p.key: p for p in a.provenance}
    for p in b.provenance:
        old = prov.get(p.key)
        prov[p.key] = (
            p
            if old is None
            else replace(old, count=max(old.count, p.count), weight=max(old.weight, p.weight))
        )
    outputs = a.outputs or b.outputs
    repro = {_repro_key(r): r for r in a.repro}
    for r in b.repro:
        repro.setdefault(_repro_key(r), r)
    return Entry(
        op=a.op,
        signature=a.signature,
        constraints=_merge_constraints(a.constraints, b.constraints),
        outputs=outputs,
        provenance=[prov[k] for k in sorted(prov)],
        repro=[repro[k] for k in sorted(repro)],
    )


def _repro_key(r: dict) -> tuple[str, str, str]:
    """A root cause is reproduced once per (run, case, stage): adding a run's repros again keeps one."""
    return (str(r.get("run", "")), str(r.get("case", "")), str(r.get("stage", "")))


@dataclass
class Diff:
    added: list[str]  # case ids
    removed: list[str]
    ops_added: list[str]
    ops_removed: list[str]

    def to_dict(self) -> dict:
        return {
            "signatures_added": len(self.added),
            "signatures_removed": len(self.removed),
            "ops_added": self.ops_added,
            "ops_removed": self.ops_removed,
        }


class Registry:
    """In-memory registry: a dict from (op, sig_hash) to Entry."""

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}
        for e in entries:
            self.add(e)

    def add(self, entry: Entry) -> None:
        entry = replace(
            entry,
            constraints=dict(sorted(entry.constraints.items())),
            provenance=sorted(entry.provenance, key=lambda p: p.key),
            repro=sorted(entry.repro, key=_repro_key),
        )
        old = self._entries.get(entry.key)
        self._entries[entry.key] = entry if old is None else merge_entries(old, entry)

    def merge(self, other: Registry) -> Registry:
        for e in other:
            self.add(e)
        return self

    def __iter__(self) -> Iterator[Entry]:
        for k in sorted(self._entries):
            yield self._entries[k]

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Registry) and list(self) == list(other)

    def ops(self) -> set[str]:
        return {op for op, _ in self._entries}

    def get(self, case_id: str) -> Entry | None:
        op, _, h = case_id.rpartition("-")
        return self._entries.get((op, h))

    def diff(self, old: Registry) -> Diff:
        new_ids = {e.case_id for e in self}
        old_ids = {e.case_id for e in old}
        return Diff(
            added=sorted(new_ids - old_ids),
            removed=sorted(old_ids - new_ids),
            ops_added=sorted(self.ops() - old.ops()),
            ops_removed=sorted(old.ops() - self.ops()),
        )

    # -- Parquet ---------------------------------------------------------------------------
    def to_table(self) -> pa.Table:
        rows = [e.to_row() for e in self]
        table = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
        return table.replace_schema_metadata({METADATA_KEY: str(SCHEMA_VERSION).encode()})

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (temp file then rename): a killed save never leaves half a registry."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            pq.write_table(self.to_table(), tmp, compression="zstd")
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make the data file private
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> Registry:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"registry file not found: {path}")
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise RegistryFormatError(f"{path}: not a Parquet file ({exc})") from exc
        meta = table.schema.metadata or {}
        version = meta.get(METADATA_KEY)
        if version is None:
            raise RegistryFormatError(f"{path}: no registry schema version in the file metadata")
        if int(version) != SCHEMA_VERSION:
            raise RegistryFormatError(
                f"{path}: registry schema version {int(version)}, this harness reads version {SCHEMA_VERSION}"
            )
        missing = [n for n in ARROW_SCHEMA.names if n not in table.schema.names and n not in OPTIONAL_COLUMNS]
        if missing:
            raise RegistryFormatError(f"{path}: missing columns {missing}")
        reg = cls()
        for row in table.select([n for n in ARROW_SCHEMA.names if n in table.schema.names]).to_pylist():
            reg.add(Entry.from_row(row))
        return reg
