"""A tiny, safe expression language for the size formulas in input_recipes.yaml.

Recipes say how big an input is in terms of the config (``context_length + max(lags_sequence)``),
so the formulas are data, not code. Only arithmetic, comparisons, ``a if c else b``, lists,
attribute access on sub-configs and a few pure functions are allowed; anything else (calls of
other names, subscripts on arbitrary objects, imports, dunder attributes) is a ``RecipeError``.
A name the scope does not have raises ``NameError``, which a recipe uses to mean "does not apply".

    >>> evaluate("context_length + max(lags_sequence)", {"context_length": 8, "lags_sequence": [1, 2]})
    10
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Mapping


class RecipeError(ValueError):
    """A recipe formula uses something the language does not allow."""


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv,
           ast.Pow: operator.pow}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_FUNCTIONS = {"max": max, "min": min, "len": len, "int": int, "sum": sum, "abs": abs, "bool": bool,
              "ceil": math.ceil, "prod": math.prod, "list": list,
              "endswith": lambda s, suffix: str(s).endswith(suffix)}


def evaluate(text: Any, scope: Mapping[str, Any]) -> Any:
    """Value of a formula (a non-string is returned as it is)."""
    if not isinstance(text, str):
        return text
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise RecipeError(f"not a formula: {text!r}") from exc
    return _eval(tree.body, scope)


def _eval(node: ast.AST, scope: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[node.id]
        if node.id not in scope or scope[node.id] is None:
            raise NameError(node.id)
        return scope[node.id]
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            raise RecipeError(f"private attribute {node.attr!r}")
        base = _eval(node.value, scope)
        value = base.get(node.attr) if isinstance(base, dict) else getattr(base, node.attr, None)
        if value is None:
            raise NameError(node.attr)
        return value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval(node.left, scope), _eval(node.right, scope))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        v = _eval(node.operand, scope)
        return -v if isinstance(node.op, ast.USub) else not v
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, scope) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, scope)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, scope)
            if type(op) not in _COMPARE or not _COMPARE[type(op)](left, right):
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
            raise RecipeError("only lists and dicts can be indexed")
        return base[_eval(node.slice, scope)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS and not node.keywords:
        return _FUNCTIONS[node.func.id](*[_eval(a, scope) for a in node.args])
    raise RecipeError(f"not allowed in a recipe formula: {ast.dump(node)[:80]}")


def defined(text: str, scope: Mapping[str, Any]) -> bool:
    """Whether a formula can be evaluated in the scope and is truthy (a missing name is False)."""
    try:
        return bool(evaluate(text, scope))
    except (NameError, TypeError, KeyError, IndexError, ValueError, ZeroDivisionError):
        return False
