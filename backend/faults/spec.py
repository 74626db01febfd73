"""What a fault is and how a fault file is read: the `Fault` record and its validation.

Every malformed entry raises `backend.errors.FaultFileError` naming the source and the entry (its
name, else its position), so a typo never silently plants nothing.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import yaml

from backend.errors import FaultFileError

ENV_VAR = "NEURON_FAULTS"
LOG_ENV_VAR = "NEURON_FAULT_LOG"
SUITE_RESOURCE = "suite.yaml"
KINDS = ("perturb", "nan", "substitute", "raise", "hang", "crash", "fallback")
VALUE_KINDS = ("perturb", "nan")
SCOPES = ("both", "eager", "compiled")
#: a crash dies of one of these (not SIGKILL: the runner reads an unsent SIGKILL as the OOM killer)
SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGILL", "SIGFPE")
CONDITIONS = ("eq", "min", "max", "multiple_of", "not_multiple_of")
_KEYS = {
    "name",
    "op",
    "kind",
    "scope",
    "dtypes",
    "when",
    "output",
    "input",
    "index",
    "rel",
    "pattern",
    "kwargs",
    "message",
    "seconds",
    "signal",
    "category",
    "description",
}
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


def _number(src: str, entry: str, key: str, value: Any, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FaultFileError(src, entry, f"{key} must be a number, got {value!r}")
    if positive and value <= 0:
        raise FaultFileError(src, entry, f"{key} must be > 0, got {value!r}")
    return float(value)


def _int(src: str, entry: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FaultFileError(src, entry, f"{key} must be an integer, got {value!r}")
    return value


def _conditions(src: str, entry: str, raw: Any, args: set[str]) -> tuple[Condition, ...]:
    if not isinstance(raw, list):
        raise FaultFileError(
            src, entry, "when must be a list of {arg, dim, min|max|eq|multiple_of} or {arg, rank}"
        )
    out = []
    for i, c in enumerate(raw):
        where = f"when[{i}]"
        if not isinstance(c, dict) or "arg" not in c:
            raise FaultFileError(src, entry, f"{where}: expected a mapping with 'arg', got {c!r}")
        if c["arg"] not in args:
            raise FaultFileError(
                src,
                entry,
                f"{where}: the op has no argument {c['arg']!r} (it has: {', '.join(sorted(args))})",
            )
        tests = [k for k in c if k in CONDITIONS or k == "rank"]
        unknown = set(c) - {"arg", "dim", "rank", *CONDITIONS}
        if unknown or len(tests) != 1:
            raise FaultFileError(
                src,
                entry,
                f"{where}: give exactly one of rank, {', '.join(CONDITIONS)} "
                f"(and 'dim' with the latter); got keys {sorted(c)}",
            )
        test = tests[0]
        value = _int(src, entry, f"{where}.{test}", c[test])
        if test in ("multiple_of", "not_multiple_of") and value <= 0:
            raise FaultFileError(src, entry, f"{where}.{test} must be > 0")
        if test == "rank":
            if "dim" in c:
                raise FaultFileError(src, entry, f"{where}: 'rank' takes no 'dim'")
            out.append(Condition(c["arg"], None, "eq", value))
        else:
            if "dim" not in c:
                raise FaultFileError(src, entry, f"{where}: {test} needs a 'dim'")
            out.append(Condition(c["arg"], _int(src, entry, f"{where}.dim", c["dim"]), test, value))
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
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise FaultFileError(src, entry, f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise FaultFileError(src, entry, f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    overloads, ops = _resolve_op(src, entry, raw.get("op"))
    args = _arg_names(ops)
    kw: dict[str, Any] = {"name": entry, "op": raw["op"], "kind": kind, "overloads": overloads}
    scope = raw.get("scope", "both")
    if scope not in SCOPES:
        raise FaultFileError(src, entry, f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    kw["scope"] = scope
    if "dtypes" in raw:
        names = raw["dtypes"]
        known = _dtype_names()
        if not isinstance(names, list) or not names or any(n not in known for n in names):
            raise FaultFileError(
                src,
                entry,
                f"dtypes must be a non-empty list of dtype names (e.g. float32, bfloat16), got {names!r}",
            )
        kw["dtypes"] = frozenset(known[n] for n in names)
    if "when" in raw:
        kw["when"] = _conditions(src, entry, raw["when"], args)
    value_keys = [k for k in ("output", "input", "index") if k in raw]
    if value_keys and kind not in VALUE_KINDS:
        raise FaultFileError(
            src, entry, f"{value_keys[0]!r} only applies to the kinds {', '.join(VALUE_KINDS)}"
        )
    if "output" in raw and "input" in raw:
        raise FaultFileError(src, entry, "give 'output' or 'input', not both")
    if "output" in raw:
        kw["output"] = _int(src, entry, "output", raw["output"])
        if kw["output"] < 0 or all(kw["output"] >= len(o._schema.returns) for o in ops):
            raise FaultFileError(
                src,
                entry,
                f"output {raw['output']} does not exist (the op returns "
                f"{max(len(o._schema.returns) for o in ops)})",
            )
    if "input" in raw:
        name = raw["input"]
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
    if "index" in raw:
        idx = raw["index"]
        if not isinstance(idx, dict) or set(idx) != {"dim", "at"}:
            raise FaultFileError(src, entry, "index must be {dim: D, at: first|last|N}")
        at = idx["at"]
        if at not in ("first", "last") and (isinstance(at, bool) or not isinstance(at, int)):
            raise FaultFileError(src, entry, f"index.at must be first, last or an integer, got {at!r}")
        kw["index"] = (_int(src, entry, "index.dim", idx["dim"]), at)
    if kind == "perturb":
        if "rel" not in raw:
            raise FaultFileError(src, entry, "perturb needs 'rel' (the relative error, e.g. 0.01 for 1%)")
        kw["rel"] = _number(src, entry, "rel", raw["rel"], positive=True)
        kw["pattern"] = raw.get("pattern", "signs")
        if kw["pattern"] not in ("signs", "scale"):
            raise FaultFileError(src, entry, f"pattern must be signs or scale, got {kw['pattern']!r}")
    elif "rel" in raw or "pattern" in raw:
        raise FaultFileError(src, entry, "'rel'/'pattern' only apply to kind perturb")
    if kind == "substitute":
        subs = raw.get("kwargs")
        if not isinstance(subs, dict) or not subs:
            raise FaultFileError(
                src, entry, "substitute needs 'kwargs': argument name -> the value used instead"
            )
        bad = [k for k in subs if k not in args]
        if bad:
            raise FaultFileError(
                src, entry, f"kwargs: the op has no argument {bad[0]!r} (it has: {', '.join(sorted(args))})"
            )
        kw["kwargs"] = dict(subs)
    elif "kwargs" in raw:
        raise FaultFileError(src, entry, "'kwargs' only applies to kind substitute")
    if "message" in raw:
        if kind != "raise" or not isinstance(raw["message"], str):
            raise FaultFileError(src, entry, "'message' is a string and only applies to kind raise")
        kw["message"] = raw["message"]
    if "seconds" in raw:
        if kind != "hang":
            raise FaultFileError(src, entry, "'seconds' only applies to kind hang")
        kw["seconds"] = (
            None if raw["seconds"] is None else _number(src, entry, "seconds", raw["seconds"], True)
        )
    if "signal" in raw:
        if kind != "crash" or raw["signal"] not in SIGNALS:
            raise FaultFileError(
                src, entry, f"'signal' applies to kind crash and is one of {', '.join(SIGNALS)}"
            )
        kw["signal"] = raw["signal"]
    for key in ("category", "description"):
        if key in raw:
            if not isinstance(raw[key], str):
                raise FaultFileError(src, entry, f"{key} must be a string")
            kw[key] = raw[key]
    return Fault(**kw)


def parse_faults(data: Any, source: str = "<faults>") -> list[Fault]:
    """A whole document: ``{version, faults: [...]}`` or a bare list. Names must be unique."""
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"version", "faults", "description"})
        if unknown:
            raise FaultFileError(
                source, unknown[0], "unknown top-level key (known: version, faults, description)"
            )
        entries = data.get("faults")
    else:
        entries = data
    if not isinstance(entries, list):
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
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise FaultFileError(str(p), "<file>", f"cannot read: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise FaultFileError(
            str(p), f"line {mark.line + 1}" if mark else "<file>", f"not valid YAML: {exc}"
        ) from exc
    return parse_faults(data, str(p))


def suite_path() -> Path:
    """The bundled fault suite (what benchmarks/bug_detection.py plants one by one)."""
    return Path(str(resources.files("backend.faults").joinpath(SUITE_RESOURCE)))


def load_suite() -> list[Fault]:
    return read_faults(suite_path())
