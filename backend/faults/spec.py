"""What a fault is and how a fault file is read: the `Fault` record and its validation.

A file is read into typed entries (`FaultEntry`: unknown keys and wrong types are errors), then
checked for what a type cannot say (the op exists, a key applies to the kind). Every malformed
entry raises `backend.errors.FaultFileError` naming the source and the entry (its name, else its
position) and the key, so a typo never silently plants nothing.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import torch
from pydantic import AfterValidator

from backend.data_files import DataModel, read_data, validate
from backend.errors import FaultFileError

SUITE_RESOURCE = "suite.yaml"
KINDS = ("perturb", "nan", "substitute", "raise", "hang", "crash", "fallback")
VALUE_KINDS = ("perturb", "nan")
SCOPES = ("both", "eager", "compiled")
#: a crash dies of one of these (not SIGKILL: the runner reads an unsent SIGKILL as the OOM killer)
SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGILL", "SIGFPE")
CONDITIONS = ("eq", "min", "max", "multiple_of", "not_multiple_of")
#: PyTorch routes these ops of an out-of-tree device to other overloads: a fault on the first
#: also arms the second (eager sees convolution_overrideable, a compiled graph sees convolution).
_ROUTED = {
    "aten.convolution.default": "aten.convolution_overrideable.default",
    "aten.convolution_backward.default": "aten.convolution_backward_overrideable.default",
}
#: explicit device kernels that never reach the op path (allocation, transfers, metadata views)
_NOT_FAULTABLE = (
    "aten.empty.",
    "aten.empty_strided.",
    "aten._copy_from.",
    "aten._copy_from_and_resize.",
    "aten.clone.",
    "aten.view.",
    "aten.as_strided.",
    "aten._reshape_alias.",
    "aten.resize_.",
    "aten.set_.",
    "aten._fused_sdp_choice.",
)


@dataclass(frozen=True)
class Condition:
    """A shape predicate on one tensor argument: ``{arg: self, dim: -1, min: 64}`` or ``rank``."""

    arg: str
    dim: int | None = None  # None: the condition is on the rank
    test: str = "eq"  # eq | min | max | multiple_of | not_multiple_of
    value: int = 0

    def holds(self, t: torch.Tensor) -> bool:
        if self.dim is None:
            n = t.dim()
        elif -t.dim() <= self.dim < t.dim():
            n = int(t.shape[self.dim])
        else:
            return False
        if self.test == "eq":
            return n == self.value
        if self.test == "min":
            return n >= self.value
        if self.test == "max":
            return n <= self.value
        if self.test == "multiple_of":
            return n % self.value == 0
        return n % self.value != 0


@dataclass(frozen=True)
class Fault:
    """One planted fault (validated; see the module docstring for the kinds)."""

    name: str
    op: str  # as written: an overload "aten.mm.default" or a packet "aten.mm"
    kind: str
    overloads: frozenset[str] = frozenset()  # resolved overload names the fault arms (+ out= variants)
    scope: str = "both"
    dtypes: frozenset[torch.dtype] = frozenset()  # some tensor input has one of these (empty: any)
    when: tuple[Condition, ...] = ()
    output: int | None = None  # value kinds: which output (None: every floating output)
    input: str | None = None  # value kinds: corrupt this input (a copy) instead of the outputs
    index: tuple[int, str | int] | None = None  # value kinds: only the slice (dim, first|last|N)
    rel: float = 0.0
    pattern: str = "signs"  # perturb: signs (each element off by exactly ±rel) | scale (all by +rel)
    kwargs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    message: str = ""
    seconds: float | None = None
    signal: str = "SIGSEGV"
    category: str = ""
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fault in its file format (what `load` reads back)."""
        d: dict[str, Any] = {"name": self.name, "op": self.op, "kind": self.kind}
        if self.scope != "both":
            d["scope"] = self.scope
        if self.dtypes:
            d["dtypes"] = sorted(str(t).removeprefix("torch.") for t in self.dtypes)
        if self.when:
            d["when"] = [
                {
                    "arg": c.arg,
                    **({"dim": c.dim} if c.dim is not None else {}),
                    (c.test if c.dim is not None or c.test != "eq" else "rank"): c.value,
                }
                for c in self.when
            ]
        for key in ("output", "input"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        if self.index is not None:
            d["index"] = {"dim": self.index[0], "at": self.index[1]}
        extra = {
            "perturb": {"rel": self.rel, "pattern": self.pattern},
            "substitute": {"kwargs": self.kwargs},
            "raise": {"message": self.message} if self.message else {},
            "hang": {"seconds": self.seconds} if self.seconds is not None else {},
            "crash": {"signal": self.signal},
        }.get(self.kind, {})
        d.update(extra)
        d.update({k: getattr(self, k) for k in ("category", "description") if getattr(self, k)})
        return d


# ------------------------------------------------------------------------------------ parsing


def _dtype_names() -> dict[str, torch.dtype]:
    from backend.lowering import _DTYPES

    return _DTYPES


def _resolve_op(src: str, entry: str, op: Any) -> tuple[frozenset[str], list[Any]]:
    """'aten.mm.default' or 'aten.mm' -> (overload names, OpOverload objects); errors name the entry."""
    if not isinstance(op, str) or op.count(".") not in (1, 2) or not op.startswith("aten."):
        raise FaultFileError(src, entry, f"op must look like 'aten.mm.default' or 'aten.mm', got {op!r}")
    parts = op.split(".")
    packet = getattr(torch.ops.aten, parts[1], None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        raise FaultFileError(src, entry, f"op {op!r} does not exist in torch {torch.__version__}")
    names = [parts[2]] if len(parts) == 3 else list(packet.overloads())
    overloads = []
    for n in names:
        try:
            overloads.append(getattr(packet, n))
        except AttributeError:
            raise FaultFileError(
                src, entry, f"op {parts[1]} has no overload {n!r} (it has: {', '.join(packet.overloads())})"
            ) from None
    if any(_is_view(o) for o in overloads):
        overloads = [o for o in overloads if not _is_view(o)] if len(parts) == 2 else []
        if not overloads:
            raise FaultFileError(
                src,
                entry,
                f"{op} is a view (metadata only on the device); fault the op that computes the data",
            )
    overloads += [
        o for o in (_out_variant(packet, op) for op in overloads) if o is not None and o not in overloads
    ]
    full = [f"aten.{parts[1]}.{o._overloadname}" for o in overloads]
    blocked = [n for n in full if n.startswith(_NOT_FAULTABLE)]
    if blocked:
        raise FaultFileError(
            src,
            entry,
            f"{blocked[0]} is an explicit device kernel (allocation, transfer or "
            "metadata view) that never reaches the op path; fault the op that computes the data",
        )
    full += [_ROUTED[n] for n in full if n in _ROUTED]
    return frozenset(full), overloads


def _out_variant(packet: Any, op: Any) -> Any:
    """The ``out=`` overload computing the same as `op` (composite ops such as ``abs`` reach the
    device as ``abs.out``): same arguments plus ``out``."""
    want = [(a.name, str(a.type)) for a in op._schema.arguments]
    for name in packet.overloads():
        other = getattr(packet, name)
        args = [(a.name, str(a.type)) for a in other._schema.arguments if a.name != "out"]
        if other is not op and args == want and any(a.name == "out" for a in other._schema.arguments):
            return other
    return None


def _is_view(op: Any) -> bool:
    rets = op._schema.returns
    return bool(rets) and rets[0].alias_info is not None and not rets[0].alias_info.is_write


def _arg_names(overloads: list[Any]) -> set[str]:
    return {a.name for o in overloads for a in o._schema.arguments}


class ConditionEntry(DataModel):
    """A ``when:`` item of a fault file: ``{arg, rank}`` or ``{arg, dim, <one test>}``."""

    arg: str
    dim: int | None = None
    rank: int | None = None
    eq: int | None = None
    min: int | None = None
    max: int | None = None
    multiple_of: int | None = None
    not_multiple_of: int | None = None


def _at(value: Any) -> Any:
    if value in ("first", "last") or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError("at is first, last or an integer")


class IndexEntry(DataModel):
    """``index: {dim: D, at: first|last|N}``: the slice a value fault corrupts."""

    dim: int
    at: Annotated[Any, AfterValidator(_at)]


class FaultEntry(DataModel):
    """One fault as written in a fault file (see `Fault` for the meaning of each key); the rules
    a type cannot say (the op exists, a key applies to the kind) are checked by `parse_fault`."""

    name: str
    op: str
    kind: str
    scope: str = "both"
    dtypes: list[str] | None = None
    when: list[ConditionEntry] | None = None
    output: int | None = None
    input: str | None = None
    index: IndexEntry | None = None
    rel: float | None = None
    pattern: str | None = None
    kwargs: dict[str, Any] | None = None
    message: str | None = None
    seconds: float | None = None
    signal: str | None = None
    category: str | None = None
    description: str | None = None


class FaultDocument(DataModel):
    """A fault file's top level (``faults:`` is validated entry by entry, to name each by its name)."""

    version: int | None = None
    description: str | None = None
    faults: list[Any]


def _number(src: str, entry: str, key: str, value: float, positive: bool = False) -> float:
    if not math.isfinite(value):
        raise FaultFileError(src, entry, f"{key} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise FaultFileError(src, entry, f"{key} must be > 0, got {value!r}")
    return float(value)


def _conditions(src: str, entry: str, raw: list[ConditionEntry], args: set[str]) -> tuple[Condition, ...]:
    out = []
    for i, c in enumerate(raw):
        where = f"when[{i}]"
        if c.arg not in args:
            raise FaultFileError(
                src,
                entry,
                f"{where}: the op has no argument {c.arg!r} (it has: {', '.join(sorted(args))})",
            )
        tests = [k for k in ("rank", *CONDITIONS) if getattr(c, k) is not None]
        if len(tests) != 1:
            raise FaultFileError(
                src,
                entry,
                f"{where}: give exactly one of rank, {', '.join(CONDITIONS)} "
                f"(and 'dim' with the latter); got keys {sorted(c.model_fields_set)}",
            )
        test = tests[0]
        value = getattr(c, test)
        if test in ("multiple_of", "not_multiple_of") and value <= 0:
            raise FaultFileError(src, entry, f"{where}.{test} must be > 0")
        if test == "rank":
            if c.dim is not None:
                raise FaultFileError(src, entry, f"{where}: 'rank' takes no 'dim'")
            out.append(Condition(c.arg, None, "eq", value))
        else:
            if c.dim is None:
                raise FaultFileError(src, entry, f"{where}: {test} needs a 'dim'")
            out.append(Condition(c.arg, c.dim, test, value))
    return tuple(out)


def parse_fault(raw: Any, source: str = "<faults>", position: int = 0) -> Fault:
    """Validate one fault entry; a FaultFileError names the entry (its name, else its position)."""
    src = source
    entry = f"#{position}"
    if not isinstance(raw, dict):
        raise FaultFileError(
            src, entry, f"expected a mapping with name, op and kind, got {type(raw).__name__}"
        )
    if isinstance(raw.get("name"), str) and raw["name"].strip():
        entry = raw["name"]
    else:
        raise FaultFileError(src, entry, "missing 'name' (a unique, non-empty string)")
    f = validate(FaultEntry, raw, src, FaultFileError, entry=entry)
    given = f.model_fields_set
    kind = f.kind
    if kind not in KINDS:
        raise FaultFileError(src, entry, f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    overloads, ops = _resolve_op(src, entry, f.op)
    args = _arg_names(ops)
    kw: dict[str, Any] = {"name": entry, "op": f.op, "kind": kind, "overloads": overloads}
    if f.scope not in SCOPES:
        raise FaultFileError(src, entry, f"scope must be one of {', '.join(SCOPES)}, got {f.scope!r}")
    kw["scope"] = f.scope
    if f.dtypes is not None:
        known = _dtype_names()
        if not f.dtypes or any(n not in known for n in f.dtypes):
            raise FaultFileError(
                src,
                entry,
                f"dtypes must be a non-empty list of dtype names (e.g. float32, bfloat16), got {f.dtypes!r}",
            )
        kw["dtypes"] = frozenset(known[n] for n in f.dtypes)
    if f.when is not None:
        kw["when"] = _conditions(src, entry, f.when, args)
    value_keys = [k for k in ("output", "input", "index") if k in given]
    if value_keys and kind not in VALUE_KINDS:
        raise FaultFileError(
            src, entry, f"{value_keys[0]!r} only applies to the kinds {', '.join(VALUE_KINDS)}"
        )
    if f.output is not None and f.input is not None:
        raise FaultFileError(src, entry, "give 'output' or 'input', not both")
    if f.output is not None:
        if f.output < 0 or all(f.output >= len(o._schema.returns) for o in ops):
            raise FaultFileError(
                src,
                entry,
                f"output {f.output} does not exist (the op returns "
                f"{max(len(o._schema.returns) for o in ops)})",
            )
        kw["output"] = f.output
    if f.input is not None:
        name = f.input
        if name not in args:
            raise FaultFileError(
                src, entry, f"input {name!r} is not an argument of the op (it has: {', '.join(sorted(args))})"
            )
        if any(
            a.name == name and a.alias_info is not None and a.alias_info.is_write
            for o in ops
            for a in o._schema.arguments
        ):
            raise FaultFileError(src, entry, f"input {name!r} is written by the op; fault its output instead")
        kw["input"] = name
    if f.index is not None:
        kw["index"] = (f.index.dim, f.index.at)
    if kind == "perturb":
        if f.rel is None:
            raise FaultFileError(src, entry, "perturb needs 'rel' (the relative error, e.g. 0.01 for 1%)")
        kw["rel"] = _number(src, entry, "rel", f.rel, positive=True)
        kw["pattern"] = f.pattern or "signs"
        if kw["pattern"] not in ("signs", "scale"):
            raise FaultFileError(src, entry, f"pattern must be signs or scale, got {kw['pattern']!r}")
    elif "rel" in given or "pattern" in given:
        raise FaultFileError(src, entry, "'rel'/'pattern' only apply to kind perturb")
    if kind == "substitute":
        if not f.kwargs:
            raise FaultFileError(
                src, entry, "substitute needs 'kwargs': argument name -> the value used instead"
            )
        bad = [k for k in f.kwargs if k not in args]
        if bad:
            raise FaultFileError(
                src, entry, f"kwargs: the op has no argument {bad[0]!r} (it has: {', '.join(sorted(args))})"
            )
        kw["kwargs"] = dict(f.kwargs)
    elif "kwargs" in given:
        raise FaultFileError(src, entry, "'kwargs' only applies to kind substitute")
    if "message" in given:
        if kind != "raise" or f.message is None:
            raise FaultFileError(src, entry, "'message' is a string and only applies to kind raise")
        kw["message"] = f.message
    if "seconds" in given:
        if kind != "hang":
            raise FaultFileError(src, entry, "'seconds' only applies to kind hang")
        kw["seconds"] = None if f.seconds is None else _number(src, entry, "seconds", f.seconds, True)
    if "signal" in given:
        if kind != "crash" or f.signal not in SIGNALS:
            raise FaultFileError(
                src, entry, f"'signal' applies to kind crash and is one of {', '.join(SIGNALS)}"
            )
        kw["signal"] = f.signal
    for key in ("category", "description"):
        if getattr(f, key) is not None:
            kw[key] = getattr(f, key)
    return Fault(**kw)


def parse_faults(data: Any, source: str = "<faults>") -> list[Fault]:
    """A whole document: ``{version, faults: [...]}`` or a bare list. Names must be unique."""
    if isinstance(data, dict):
        entries = validate(FaultDocument, data, source, FaultFileError).faults
    elif isinstance(data, list):
        entries = data
    else:
        raise FaultFileError(source, "<top level>", "expected a list of faults (or a mapping with 'faults:')")
    out, seen = [], set()
    for i, raw in enumerate(entries):
        fault = parse_fault(raw, source, i)
        if fault.name in seen:
            raise FaultFileError(source, fault.name, "duplicate fault name")
        seen.add(fault.name)
        out.append(fault)
    return out


def read_faults(path: str | os.PathLike) -> list[Fault]:
    """Parse a fault file (YAML or JSON) without planting it."""
    data, source = read_data(path, FaultFileError)
    return parse_faults(data, source)


def suite_path() -> Path:
    """The bundled fault suite (what benchmarks/bug_detection.py plants one by one)."""
    return Path(str(resources.files("backend.faults").joinpath(SUITE_RESOURCE)))


def load_suite() -> list[Fault]:
    return read_faults(suite_path())
