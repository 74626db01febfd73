"""The one formula language of the rule files: sizes, conditions and settings written as data.

Shrink rules derive widths (``hidden_size / pixel_shuffle_ratio ** 2``) and input recipes size
their tensors (``context_length + max(lags_sequence)``) from config fields. Why a language of its
own: formulas are data, not code, so they are parsed with `ast` and only a whitelist is
evaluated, never `eval`: arithmetic, comparisons, ``a if c else b``, ``and``/``or``/``not``,
lists, indexing of lists and dicts, attribute access on (sub-)configs and dicts (no ``_`` names)
and the pure functions of `FUNCTIONS`.

A name the scope does not have, or holds as None, raises `MissingName` (a NameError): a rule
reads that as "this variant does not apply". A formula outside the language, or one that fails on
its values, raises `FormulaError` (a ValueError) naming the formula. Rule files check their
formulas when they load (`check`), so a refused one is an error naming file, entry and key.

    >>> evaluate("context_length + max(lags_sequence)", {"context_length": 8, "lags_sequence": [1, 2]})
    10
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Mapping
from typing import Any

from harness.errors import FormulaError, MissingName

BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
#: The functions a formula may call (pure, positional arguments only).
FUNCTIONS = {
    "max": max,
    "min": min,
    "len": len,
    "int": int,
    "sum": sum,
    "abs": abs,
    "bool": bool,
    "ceil": math.ceil,
    "prod": math.prod,
    "list": list,
    "endswith": lambda s, suffix: str(s).endswith(suffix),
}
_NODES = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.List,
    ast.Tuple,
    ast.Subscript,
    ast.Call,
    ast.USub,
    ast.Not,
    ast.And,
    ast.Or,
    *BINARY,
    *COMPARE,
)
#: What evaluating a formula may raise besides MissingName: reported as a FormulaError.
_VALUE_ERRORS = (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, OverflowError)


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> ast.expr:
    """The checked syntax tree of a formula; FormulaError for one outside the language."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"{text!r} is not a formula: {exc.msg}") from exc
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise FormulaError(f"{text!r}: {type(node).__name__} is not allowed in a formula")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise FormulaError(f"{text!r}: private attribute {node.attr!r} is not allowed in a formula")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords
        ):
            raise FormulaError(f"{text!r}: only {', '.join(sorted(FUNCTIONS))} may be called, positionally")
    return tree.body


def check(text: str) -> str:
    """`text` when it is a formula of the language (a rule file's validator); else FormulaError."""
    parse(text)
    return text


def evaluate(text: Any, scope: Mapping[str, Any]) -> Any:
    """The value of a formula over `scope` (a value that is no string is returned as it is)."""
    if not isinstance(text, str):
        return text
    node = parse(text)
    try:
        return _eval(node, scope)
    except MissingName as exc:
        raise MissingName(f"{exc.name!r} in {text!r}", name=exc.name) from None
    except _VALUE_ERRORS as exc:
        raise FormulaError(f"{text!r}: {type(exc).__name__}: {exc}") from exc


def defined(text: str, scope: Mapping[str, Any]) -> bool:
    """Whether a formula evaluates in the scope and is truthy (a missing name: False)."""
    try:
        return bool(evaluate(text, scope))
    except (NameError, ValueError):
        return False


def _eval(node: ast.AST, scope: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in scope or scope[node.id] is None:
            raise MissingName(node.id, name=node.id)
        return scope[node.id]
    if isinstance(node, ast.Attribute):
        base = _eval(node.value, scope)
        value = base.get(node.attr) if isinstance(base, dict) else getattr(base, node.attr, None)
        if value is None:
            raise MissingName(node.attr, name=node.attr)
        return value
    if isinstance(node, ast.BinOp):
        return BINARY[type(node.op)](_eval(node.left, scope), _eval(node.right, scope))
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, scope)
        return -v if isinstance(node.op, ast.USub) else not v
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, scope) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, scope)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, scope)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, scope) if _eval(node.test, scope) else _eval(node.orelse, scope)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, scope) for e in node.elts]
    if isinstance(node, ast.Subscript):
        base = _eval(node.value, scope)
        if not isinstance(base, (list, tuple, dict)):
            raise TypeError(f"only lists and dicts can be indexed, not {type(base).__name__}")
        return base[_eval(node.slice, scope)]
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](*[_eval(a, scope) for a in node.args])
    raise FormulaError(f"{type(node).__name__} is not allowed in a formula")  # parse() refused it already
