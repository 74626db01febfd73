"""PyTorch's operator-benchmark input logs (``operator_inp_logs``): import and export.

    Operator: aten.addmm.default
    cnt: 49, ((T([768], f16), T([8192, 768], f16), T([768, 768], f16, stride=(1, 768))), {})

Lines are parsed with `ast` (never evaluated): ``T(shape, dtype[, stride=...])`` is a tensor, bare
abbreviations (``f16``) and ``torch.bool`` are dtypes, other values are Python literals. Device
arguments (``'cuda'``) are recognized from the op's schema. The format keeps no values, so value
constraints are inferred from the op's semantics (registry/data/op_semantics.yaml). Every call
line becomes a registry entry (a runnable case) or an `Unreplayable` with its line number and
reason: nothing is dropped silently.

    result = import_oplog("GPT2ForSequenceClassification_training.txt")
    result.registry.save("gpt2.parquet"); result.unreplayable  # [Unreplayable(line=..., reason=...)]
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from registry.constraints import canonical_op, infer_constraints, unreplayable_reason
from registry.encoding import ABBREV_DTYPES, LAYOUTS, MEMORY_FORMATS, find_opaque, signature
from registry.errors import UnreplayableError
from registry.schema import Entry, Provenance
from registry.store import Registry

_OPERATOR = re.compile(r"^Operator:\s*(\S+)\s*$")
_CALL = re.compile(r"^cnt:\s*(\d+)\s*,\s*(.*)$")
_TORCH_ATTRS = {f"torch.{name}": {"layout": name} for name in LAYOUTS.values()}
_TORCH_ATTRS.update({f"torch.{name}": {"memory_format": name} for name in MEMORY_FORMATS.values()})


@dataclass(frozen=True)
class Unreplayable:
    line: int  # 1-based line number in the file
    op: str
    text: str
    reason: str


@dataclass
class ImportResult:
    registry: Registry
    lines: int = 0  # call lines ("cnt: ...") seen
    cases: int = 0  # call lines that became runnable cases
    unreplayable: list[Unreplayable] = field(default_factory=list)
    scaled: dict[int, int] = field(default_factory=dict)  # scale factor -> cases replayed scaled down
    shape_budget: int = 0  # the replay budget (elements of the largest tensor) the decision used

    def to_dict(self) -> dict:
        reasons: dict[str, int] = {}
        for u in self.unreplayable:
            key = u.reason.split(" (", 1)[0] if u.reason.startswith("recorded under autocast") else u.reason
            reasons[key] = reasons.get(key, 0) + 1
        return {
            "lines": self.lines,
            "cases": self.cases,
            "scaled": sum(self.scaled.values()),
            "scaled_by_factor": {str(k): v for k, v in sorted(self.scaled.items())},
            "shape_budget": self.shape_budget,
            "unreplayable": len(self.unreplayable),
            "signatures": len(self.registry),
            "ops": len(self.registry.ops()),
            "unreplayable_reasons": reasons,
            "unreplayable_lines": [vars(u) for u in self.unreplayable],
        }


def _dtype_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name) and node.id in ABBREV_DTYPES:
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        dt = getattr(torch, node.attr, None)
        if isinstance(dt, torch.dtype):
            from registry.encoding import DTYPE_ABBREVS

            return DTYPE_ABBREVS.get(dt)
    return None


def _literal(node: ast.AST):
    """AST node of the log format -> encoded value (as registry.encoding produces)."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, float) and node.value != node.value:
            return {"float": "nan"}
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_literal(x) for x in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal(node.operand)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
        if inner == {"float": "inf"}:
            return {"float": "-inf"}
        raise UnreplayableError(f"cannot negate {ast.unparse(node.operand)}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "T":
        return _tensor(node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "device":
        return {"device": "dev"}
    dt = _dtype_name(node)
    if dt:
        return {"dtype": dt}
    if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
        return {"float": node.id}
    text = ast.unparse(node)
    if text in _TORCH_ATTRS:
        return _TORCH_ATTRS[text]
    raise UnreplayableError(f"unknown value {text[:60]!r}")


def _tensor(node: ast.Call) -> dict:
    if len(node.args) < 2:
        raise UnreplayableError("T(...) without shape and dtype")
    shape = _literal(node.args[0])
    dt = _dtype_name(node.args[1])
    if dt is None or not isinstance(shape, list) or not all(isinstance(s, int) for s in shape):
        raise UnreplayableError(f"unsupported tensor {ast.unparse(node)[:60]}")
    enc: dict = {"T": shape, "dt": dt}
    for kw in node.keywords:
        value = _literal(kw.value)
        if kw.arg == "stride":
            enc["st"] = list(value)
        elif kw.arg == "storage_offset":
            if value:
                enc["off"] = int(value)
        else:
            raise UnreplayableError(f"unknown tensor attribute {kw.arg}")
    return enc


def _fix_devices(op: str, args: list, kwargs: dict) -> None:
    """Turn device strings into device values where the schema says the argument is a Device."""
    try:
        parts = op.split(".")
        schema = getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])._schema
    except (AttributeError, IndexError, RuntimeError):
        return
    for i, arg in enumerate(schema.arguments):
        if "Device" not in str(arg.type):
            continue
        if i < len(args) and not arg.kwarg_only and isinstance(args[i], str):
            args[i] = {"device": "dev"}
        if isinstance(kwargs.get(arg.name), str):
            kwargs[arg.name] = {"device": "dev"}


def parse_call(op: str, text: str) -> tuple[list, dict]:
    """``((args...), {kwargs})`` -> encoded (args, kwargs). UnreplayableError with the reason."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise UnreplayableError(f"malformed call: {exc.msg}") from exc
    if not (isinstance(tree, ast.Tuple) and len(tree.elts) == 2 and isinstance(tree.elts[1], ast.Dict)):
        raise UnreplayableError("malformed call: expected ((args), {kwargs})")
    args = _literal(tree.elts[0])
    kwargs = {}
    for k, v in zip(tree.elts[1].keys, tree.elts[1].values):
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            raise UnreplayableError("malformed call: kwarg names must be strings")
        kwargs[k.value] = _literal(v)
    _fix_devices(op, args, kwargs)
    return args, dict(sorted(kwargs.items()))


def _check(op: str, args: list, kwargs: dict) -> None:
    reason = unreplayable_reason(op)
    if reason:
        raise UnreplayableError(reason)
    parts = op.split(".")
    if len(parts) != 3:
        raise UnreplayableError(f"not an op overload name: {op}")
    try:
        getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError) as exc:
        raise UnreplayableError(f"op {op} does not exist in torch {torch.__version__}") from exc
    opaque = find_opaque([args, list(kwargs.values())])
    if opaque:
        raise UnreplayableError(f"argument of type {opaque} cannot be rebuilt")


def import_oplog(
    path: str | Path, model: str | None = None, tier: str = "oplog", shape_budget: int | None = None
) -> ImportResult:
    """Every call line: a case, or unreplayable with the reason. The decision is the replay's own
    (registry.replay.plan, with the same shape budget): a line called replayable here is replayed
    at run time, scaled by the factor counted here; lines recorded under autocast whose mixed
    16/32-bit call the CPU kernel rejects as recorded are unreplayable (no reference to compare with)."""
    from registry import scaling
    from registry.replay import CaseSpec, plan

    path = Path(path)
    model = model or path.stem
    result = ImportResult(Registry(), shape_budget=shape_budget or scaling.budget())
    op = ""
    for lineno, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _OPERATOR.match(line)
        if m:
            op = canonical_op(m.group(1))
            continue
        result.lines += 1
        call = _CALL.match(line)
        try:
            if not call:
                raise UnreplayableError("malformed line: neither 'Operator:' nor 'cnt: N, (...)'")
            if not op:
                raise UnreplayableError("call line before any 'Operator:' line")
            args, kwargs = parse_call(op, call.group(2))
            _check(op, args, kwargs)
        except UnreplayableError as exc:
            result.unreplayable.append(Unreplayable(lineno, op, line[:200], str(exc)))
            continue
        count = int(call.group(1))
        entry = Entry(
            op,
            signature(args, kwargs),
            infer_constraints(op, args, kwargs),
            [],
            [Provenance(model, tier, "oplog", "oplog", 0.0, count)],
        )
        p = plan(CaseSpec.from_entry(entry), result.shape_budget)
        reason = p.skip or (
            p.expected.rejected
            and "recorded under autocast: the CPU kernel rejects the mixed 16/32-bit call as recorded "
            f"({p.expected.rejected[:160]}), so there is no reference to compare with"
        )
        if reason:
            result.unreplayable.append(Unreplayable(lineno, op, line[:200], reason))
            continue
        if p.factor != 1:
            result.scaled[p.factor] = result.scaled.get(p.factor, 0) + 1
        result.registry.add(entry)
        result.cases += 1
    return result


# -- export ---------------------------------------------------------------------------------------


def _fmt(enc) -> str:
    if isinstance(enc, dict):
        if "T" in enc:
            extra = (
                f", stride=({', '.join(map(str, enc['st']))}{',' if len(enc['st']) == 1 else ''})"
                if "st" in enc
                else ""
            )
            extra += f", storage_offset={enc['off']}" if enc.get("off") else ""
            return f"T([{', '.join(map(str, enc['T']))}], {enc['dt']}{extra})"
        if "dtype" in enc:
            return enc["dtype"]
        if "device" in enc:
            return "'cuda'"
        if "layout" in enc:
            return f"torch.{enc['layout']}"
        if "memory_format" in enc:
            return f"torch.{enc['memory_format']}"
        if "float" in enc:
            return enc["float"]
        return repr(enc)
    if isinstance(enc, list):
        return "[" + ", ".join(_fmt(x) for x in enc) + "]"
    return repr(enc)


def format_call(args: list, kwargs: dict) -> str:
    inner = ", ".join(_fmt(a) for a in args) + ("," if len(args) == 1 else "")
    kw = ", ".join(f"{k!r}: {_fmt(v)}" for k, v in kwargs.items())
    return f"(({inner}), {{{kw}}})"


def export_oplog(registry: Registry) -> str:
    """The registry in the operator-input-log format (counts summed over provenance)."""
    from registry.encoding import parse_signature

    lines: list[str] = []
    current = None
    for entry in registry:
        if entry.op != current:
            current = entry.op
            lines.append(f"Operator: {entry.op}")
        args, kwargs = parse_signature(entry.signature)
        lines.append(f"cnt: {entry.count}, {format_call(args, kwargs)}")
    return "\n".join(lines) + ("\n" if lines else "")
