"""The lowering table: which aten ops the device runs natively, for which dtypes.

The table is data (``backend/lowering_table.yaml``, versioned); this module only loads,
validates and queries it. ``NEURON_LOWERING_TABLE=path`` or :func:`set_table` replaces it, e.g.
with a table exported from a real backend::

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
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import yaml

from backend.errors import LoweringTableError

ENV_VAR = "NEURON_LOWERING_TABLE"
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
    for name in ["bfloat16", "float16", "float32", "float64", "complex32", "complex64", "complex128", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e5m2"]
    if isinstance(getattr(torch, name, None), torch.dtype)
}
_TOP_KEYS = {"version", "dtype_groups", "ops", "data_dependent_shape", "not_lowered"}


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


def _expand(source: str, entry: str, names: Any, groups: dict[str, list[torch.dtype]]) -> frozenset:
    if not isinstance(names, list) or not names:
        raise LoweringTableError(source, entry, f"expected a non-empty list of dtypes, got {names!r}")
    out: set[torch.dtype] = set()
    for n in names:
        if isinstance(n, str) and n in groups:
            out.update(groups[n])
        elif isinstance(n, str) and n in _DTYPES:
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
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise LoweringTableError(
            source, sorted(unknown)[0], f"unknown top-level key (known: {sorted(_TOP_KEYS)})"
        )
    version = data.get("version")
    if not isinstance(version, (str, int, float)) or str(version).strip() == "":
        raise LoweringTableError(source, "version", "missing or empty version string")
    groups: dict[str, list[torch.dtype]] = {}
    raw_groups = data.get("dtype_groups") or {}
    if not isinstance(raw_groups, dict):
        raise LoweringTableError(source, "dtype_groups", "expected a mapping of group -> dtypes")
    for gname, members in raw_groups.items():
        groups[str(gname)] = sorted(_expand(source, f"dtype_groups.{gname}", members, {}), key=str)
    raw_ops = data.get("ops")
    if not isinstance(raw_ops, dict) or not raw_ops:
        raise LoweringTableError(source, "ops", "missing or empty mapping of op -> dtypes")
    ops: dict[str, OpLowering] = {}
    for name, value in raw_ops.items():
        name = _check_op_name(source, name)
        if isinstance(value, dict):
            extra = set(value) - {"dtypes", "data_dependent_with"}
            if extra:
                raise LoweringTableError(source, name, f"unknown key {sorted(extra)[0]!r}")
            dd = value.get("data_dependent_with")
            ops[name] = OpLowering(
                _expand(source, name, value.get("dtypes"), groups),
                _expand(source, name, dd, groups) if dd is not None else frozenset(),
            )
        else:
            ops[name] = OpLowering(_expand(source, name, value, groups))
    sections: dict[str, dict[str, str]] = {}
    for key in ("data_dependent_shape", "not_lowered"):
        raw = data.get(key) or {}
        if isinstance(raw, list):
            raw = {n: "" for n in raw}
        if not isinstance(raw, dict):
            raise LoweringTableError(source, key, "expected a mapping of op -> note")
        sections[key] = {_check_op_name(source, n): str(v or "") for n, v in raw.items()}
        for n in sections[key]:
            if n in ops:
                raise LoweringTableError(source, n, f"listed both under 'ops' and under {key!r}")
    return LoweringTable(
        version=str(version),
        source=source,
        ops=ops,
        data_dependent=sections["data_dependent_shape"],
        not_lowered=sections["not_lowered"],
    )


def load_table(path: str | os.PathLike | None = None) -> LoweringTable:
    """Load a table file (YAML or JSON), or the bundled default when ``path`` is None."""
    if path is None:
        text = resources.files("backend").joinpath(DEFAULT_RESOURCE).read_text(encoding="utf-8")
        source = f"backend/{DEFAULT_RESOURCE}"
    else:
        p = Path(path)
        source = str(p)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise LoweringTableError(source, "<file>", f"cannot read: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<file>"
        raise LoweringTableError(source, where, f"not valid YAML/JSON: {exc}") from exc
    return parse_table(data, source)


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
                _current = load_table(os.environ.get(ENV_VAR) or None)
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
        table = load_table(os.environ.get(ENV_VAR) or None)
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
