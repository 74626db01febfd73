"""The lowering table: which aten ops the device runs natively, for which dtypes.

The table is data (``backend/lowering_table.yaml``, versioned); this module only loads,
validates and queries it. The file is read into `TableFile` (unknown keys are errors naming the
file, the entry and the key), then checked for what a type cannot say (op names, known dtypes, an
op listed twice). ``NEURON_LOWERING_TABLE=path`` or :func:`set_table` replaces it, e.g. with a
table exported from a real backend::

    from backend import lowering
    ok, reason = lowering.current_table().supports("aten.nonzero.default", [torch.float32])
    # (False, "data-dependent-shape")
"""

from __future__ import annotations

import enum
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch
from pydantic import BeforeValidator, Field

from backend import settings
from backend.data_files import DataModel, bundled, read_data, validate
from backend.errors import LoweringTableError

ENV_VAR = settings.Settings.lowering_table.name
DEFAULT_RESOURCE = "lowering_table.yaml"


class FallbackReason(str, enum.Enum):
    """Why an op runs through the CPU fallback (the closed vocabulary of fallback events)."""

    NO_LOWERING = "no-lowering"
    DTYPE = "dtype"
    DATA_DEPENDENT_SHAPE = "data-dependent-shape"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in [
        "bfloat16",
        "float16",
        "float32",
        "float64",
        "complex32",
        "complex64",
        "complex128",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
        "float8_e4m3fn",
        "float8_e5m2",
    ]
    if isinstance(getattr(torch, name, None), torch.dtype)
}


def _version_text(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and not value.strip():
        raise ValueError("an empty version string")
    return value


def _listed(value: Any) -> Any:
    """An op's entry: a list of dtypes (and groups) is short for ``{dtypes: [...]}``."""
    if isinstance(value, list):
        return {"dtypes": value}
    if not isinstance(value, dict):
        raise ValueError("expected a non-empty list of dtypes or a mapping with 'dtypes'")
    return value


def _notes(value: Any) -> Any:
    """A section of op -> note; a list of ops has empty notes, an empty note is ``""``."""
    if value is None:
        return {}
    if isinstance(value, list):
        return {n: "" for n in value}
    if isinstance(value, dict):
        return {k: "" if v is None else v for k, v in value.items()}
    return value


class OpEntry(DataModel):
    """One op of the file: the dtypes it accepts, and the dtypes that make it data-dependent."""

    dtypes: list[str] = Field(min_length=1)
    data_dependent_with: list[str] | None = Field(default=None, min_length=1)


class TableFile(DataModel):
    """The lowering table's file format (``lowering_table.yaml``, or an exported JSON table)."""

    version: Annotated[str, BeforeValidator(_version_text)]
    dtype_groups: dict[str, Annotated[list[str], Field(min_length=1)]] = Field(default_factory=dict)
    ops: dict[str, Annotated[OpEntry, BeforeValidator(_listed)]] = Field(min_length=1)
    data_dependent_shape: Annotated[dict[str, str], BeforeValidator(_notes)] = Field(default_factory=dict)
    not_lowered: Annotated[dict[str, str], BeforeValidator(_notes)] = Field(default_factory=dict)


@dataclass(frozen=True)
class OpLowering:
    """One op's native lowering: the dtypes it accepts, and the dtypes that make it data-dependent."""

    dtypes: frozenset[torch.dtype]
    data_dependent_with: frozenset[torch.dtype] = frozenset()


@dataclass
class LoweringTable:
    """A loaded lowering table. ``supports()`` is cached per (op, dtypes): it sits on the hot path."""

    version: str
    source: str
    ops: dict[str, OpLowering]
    data_dependent: dict[str, str]
    not_lowered: dict[str, str]
    _cache: dict[tuple[str, tuple[torch.dtype, ...]], tuple[bool, str | None]] = field(
        default_factory=dict, repr=False
    )

    def _lookup(self, op: str, table: dict[str, Any]) -> Any:
        """Exact overload first, then the packet, then the packet of an in-place variant."""
        if op in table:
            return table[op]
        packet = op.rsplit(".", 1)[0] if op.count(".") >= 2 else op
        if packet in table:
            return table[packet]
        if packet.endswith("_") and packet[:-1] in table:
            return table[packet[:-1]]
        return None

    def supports(self, op: str, dtypes: Iterable[torch.dtype]) -> tuple[bool, str | None]:
        """(True, None) when ``op`` runs natively for these input dtypes, else (False, reason)."""
        key = (op, tuple(dtypes))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        result = self._decide(op, key[1])
        self._cache[key] = result
        return result

    def _decide(self, op: str, dtypes: tuple[torch.dtype, ...]) -> tuple[bool, str | None]:
        if self._lookup(op, self.data_dependent) is not None:
            return False, FallbackReason.DATA_DEPENDENT_SHAPE.value
        entry: OpLowering | None = self._lookup(op, self.ops)
        if entry is None:
            return False, FallbackReason.NO_LOWERING.value
        # dtypes are in argument order: the first is `self`, the rest are index-like inputs
        if any(d in entry.data_dependent_with for d in dtypes[1:]):
            return False, FallbackReason.DATA_DEPENDENT_SHAPE.value
        if any(d not in entry.dtypes for d in dtypes):
            return False, FallbackReason.DTYPE.value
        return True, None

    def native_ops(self) -> list[str]:
        return sorted(self.ops)

    def to_dict(self) -> dict[str, Any]:
        """The table in its file format (dtype groups expanded): for exporting and diffing."""
        ops: dict[str, Any] = {}
        for name, entry in sorted(self.ops.items()):
            names = sorted(_dtype_name(d) for d in entry.dtypes)
            if entry.data_dependent_with:
                ops[name] = {
                    "dtypes": names,
                    "data_dependent_with": sorted(_dtype_name(d) for d in entry.data_dependent_with),
                }
            else:
                ops[name] = names
        return {
            "version": self.version,
            "ops": ops,
            "data_dependent_shape": dict(sorted(self.data_dependent.items())),
            "not_lowered": dict(sorted(self.not_lowered.items())),
        }


def _dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def _check_op_name(source: str, name: Any) -> str:
    if not isinstance(name, str) or not name.startswith("aten.") or name.count(".") > 2:
        raise LoweringTableError(source, str(name), "op names look like 'aten.add' or 'aten.add.Tensor'")
    return name


def _expand(source: str, entry: str, names: list[str], groups: dict[str, list[torch.dtype]]) -> frozenset:
    out: set[torch.dtype] = set()
    for n in names:
        if n in groups:
            out.update(groups[n])
        elif n in _DTYPES:
            out.add(_DTYPES[n])
        else:
            raise LoweringTableError(
                source, entry, f"unknown dtype or group {n!r} (groups: {sorted(groups)})"
            )
    return frozenset(out)


def parse_table(data: Any, source: str = "<table>") -> LoweringTable:
    """Validate a loaded YAML/JSON document and build the table. Errors name the bad entry."""
    if not isinstance(data, dict):
        raise LoweringTableError(source, "<top level>", "expected a mapping with 'version' and 'ops'")
    doc = validate(TableFile, data, source, LoweringTableError)
    groups: dict[str, list[torch.dtype]] = {}
    for gname, members in doc.dtype_groups.items():
        groups[gname] = sorted(_expand(source, f"dtype_groups.{gname}", members, {}), key=str)
    ops: dict[str, OpLowering] = {}
    for name, entry in doc.ops.items():
        name = _check_op_name(source, name)
        dd = entry.data_dependent_with
        ops[name] = OpLowering(
            _expand(source, name, entry.dtypes, groups),
            _expand(source, name, dd, groups) if dd is not None else frozenset(),
        )
    sections = {"data_dependent_shape": doc.data_dependent_shape, "not_lowered": doc.not_lowered}
    for key, section in sections.items():
        for n in section:
            _check_op_name(source, n)
            if n in ops:
                raise LoweringTableError(source, n, f"listed both under 'ops' and under {key!r}")
    return LoweringTable(
        version=doc.version,
        source=source,
        ops=ops,
        data_dependent=dict(doc.data_dependent_shape),
        not_lowered=dict(doc.not_lowered),
    )


def load_table(path: str | os.PathLike | None = None) -> LoweringTable:
    """Load a table file (YAML or JSON), or the bundled default when ``path`` is None."""
    data, source = read_data(
        bundled("backend", DEFAULT_RESOURCE) if path is None else path, LoweringTableError
    )
    return parse_table(data, source)


def _table_from_env() -> LoweringTable:
    """NEURON_LOWERING_TABLE's table, else the bundled one (read on first use and on set_table(None))."""
    return load_table(settings.current().lowering_table)


_lock = threading.Lock()
_current: LoweringTable | None = None
_listeners: list = []


def current_table() -> LoweringTable:
    """The table in force: set_table()'s, else $NEURON_LOWERING_TABLE, else the bundled one."""
    global _current
    table = _current
    if table is None:
        with _lock:
            if _current is None:
                _current = _table_from_env()
            table = _current
    return table


def set_table(path_or_table: str | os.PathLike | LoweringTable | None) -> LoweringTable:
    """Replace the table (a path, a LoweringTable, or None for env/default). Returns the new one.

    The new table is loaded and validated before it replaces the old one, so a malformed file
    leaves the current table in force.
    """
    global _current
    if isinstance(path_or_table, LoweringTable):
        table = path_or_table
    elif path_or_table is None:
        table = _table_from_env()
    else:
        table = load_table(path_or_table)
    with _lock:
        _current = table
    for fn in list(_listeners):
        fn(table)
    return table


def on_table_change(fn) -> None:
    """Register a callback run after set_table (caches keyed on the old table subscribe here)."""
    _listeners.append(fn)
