"""Value constraints: what values a replayed input needs so the call means what it meant.

Shapes, dtypes and strides are not enough to rebuild a valid call: an embedding's indices must be
below its weight's rows, nll_loss targets below the class count, scatter indices unique along the
scattered dim, a log's input positive. Two sources, merged per argument path (``a.1``, ``a.1.0``,
``k.target``):

* semantics (always, also for imported op logs and fake-tensor recordings): the rules in
  ``data/op_semantics.yaml``, resolved against the call's shapes and scalar arguments;
* observation (real-tensor recordings only): integer ranges and boolean mask density of the
  values the model actually passed. Semantics win where both speak.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import torch
from pydantic import Field, model_validator

from contracts.rulefiles import Rules, cached_rules, resource

#: an argument of a call: a position, or a keyword's name
Arg = int | str


class Bound(Rules):
    """Where an index rule's exclusive upper bound comes from (one of the forms below)."""

    size_of: Arg | None = None  # the size of this argument ...
    dim: int | Literal["$i"] | None = None  # ... along this dim ("$i": dim i for list element i)
    dim_arg: Arg | None = None  # ... along the dim another argument gives
    class_dim: bool = False  # ... along a loss input's class dim
    value_of: Arg | None = None  # an integer argument's value
    grouped_mm: bool = False  # the grouped dim of _grouped_mm


class Special(Rules):
    """A value with a meaning of its own (padding, ignore index), planted as a boundary value."""

    value_of: Arg
    min: int | None = None  # below it the value means "none"


class MaskCount(Rules):
    """Where a boolean mask's True count comes from (one of the two forms)."""

    values_of: Arg | None = None  # index_put: the values written, at the position the mask selects
    numel_of: Arg | None = None  # at most this argument's elements (a tensor, or a list of sizes) ...
    broadcast_with: Arg | None = None  # ... counting the mask broadcast with this tensor

    @model_validator(mode="after")
    def _one_form(self) -> MaskCount:
        if (self.values_of is None) == (self.numel_of is None):
            raise ValueError("give exactly one of values_of, numel_of")
        return self


class SemanticRule(Rules):
    """One argument's value constraint (data/op_semantics.yaml's header lists the kinds)."""

    arg: Arg
    kind: Literal["index", "mask", "positive", "unit_interval", "sorted", "nonzero", "range", "offsets"]
    high: Bound | int | None = None  # index/offsets: a Bound; range: a number
    low: int = 0  # range
    special: Special | None = None
    unique: bool = False
    unique_unless: Arg | None = None
    mask_count: MaskCount | None = None
    each: bool = False  # the argument is a list: the rule applies to every element


class OpSemantics(Rules):
    """registry/data/op_semantics.yaml."""

    version: int
    rules: dict[str, tuple[SemanticRule, ...]]
    metadata_only: tuple[str, ...] = ()
    metadata_only_outputs: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    unreplayable: dict[str, str] = Field(default_factory=dict)
    renamed: dict[str, str] = Field(default_factory=dict)


def semantics() -> OpSemantics:
    """The op semantics, read once per process."""
    return cached_rules(OpSemantics, str(resource("registry", "data/op_semantics.yaml")))


def _lookup_keys(op: str) -> list[str]:
    """Keys to try for an overload name, most specific first."""
    parts = op.split(".")
    ns, packet = parts[0], parts[1] if len(parts) > 1 else ""
    overload = parts[2] if len(parts) > 2 else "default"
    keys = [f"{ns}.{packet}.{overload}", f"{ns}.{packet}"]
    base_overload = overload.removesuffix("_out").removesuffix("out") or "default"
    if base_overload != overload:
        keys.insert(1, f"{ns}.{packet}.{base_overload}")
    if packet.endswith("_") and not packet.endswith("__"):  # in place (_index_put_impl_ too), not a dunder
        keys += [f"{ns}.{packet[:-1]}.{overload}", f"{ns}.{packet[:-1]}"]
    return keys


@functools.lru_cache(maxsize=4096)
def op_rules(op: str) -> tuple[SemanticRule, ...]:
    rules = semantics().rules
    for key in _lookup_keys(op):
        if key in rules:
            return rules[key]
    return ()


@functools.lru_cache(maxsize=4096)
def _entry(op: str, section: str) -> Any:
    """The entry of a section (a list of ops, or ops -> a value) for `op`, by its lookup keys."""
    entries = getattr(semantics(), section)
    for key in _lookup_keys(op):
        if key in entries:
            return entries[key] if isinstance(entries, dict) else key
    return None


def is_metadata_only(op: str) -> bool:
    """Random or uninitialized outputs: compare shape/dtype only."""
    return _entry(op, "metadata_only") is not None


def metadata_only_outputs(op: str) -> frozenset[int]:
    """Positions of outputs that are partly uninitialized (compare shape/dtype only)."""
    return frozenset(_entry(op, "metadata_only_outputs") or ())


def canonical_op(op: str) -> str:
    """The current name of an overload that older logs spell differently (aten.sum.SymInt)."""
    return semantics().renamed.get(op, op)


def unreplayable_reason(op: str) -> str | None:
    return _entry(op, "unreplayable")


def _arg(args: list, kwargs: dict, key: Any) -> Any:
    if isinstance(key, int):
        return args[key] if key < len(args) else None
    return kwargs.get(key)


def _path(key: Any) -> str:
    return f"a.{key}" if isinstance(key, int) else f"k.{key}"


def _resolve_high(spec: Bound, args: list, kwargs: dict, i: int | None) -> int | None:
    if spec.grouped_mm:
        a, b = _arg(args, kwargs, 0), _arg(args, kwargs, 1)
        if not (isinstance(a, dict) and isinstance(b, dict) and "T" in a and "T" in b):
            return None
        dims = {(2, 3): a["T"][0], (3, 2): b["T"][-1], (2, 2): a["T"][-1]}
        return dims.get((len(a["T"]), len(b["T"])))
    if spec.value_of is not None:
        value = _arg(args, kwargs, spec.value_of)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
    ref = _arg(args, kwargs, spec.size_of)
    if not (isinstance(ref, dict) and "T" in ref):
        return None
    shape = ref["T"]
    if spec.class_dim:
        dim = 1 if len(shape) >= 2 else 0
    elif spec.dim_arg is not None:
        dim = _arg(args, kwargs, spec.dim_arg)
        if not isinstance(dim, int):
            return None
    elif spec.dim == "$i":
        dim = i
    else:
        dim = 0 if spec.dim is None else spec.dim
    if not shape:
        return 1
    if dim is None or not -len(shape) <= dim < len(shape):
        return None
    return int(shape[dim])


def infer_constraints(op: str, args: list, kwargs: dict) -> dict[str, dict[str, Any]]:
    """Constraints from the op's semantics, resolved against the encoded call."""
    out: dict[str, dict[str, Any]] = {}
    for rule in op_rules(op):
        value = _arg(args, kwargs, rule.arg)
        base = _path(rule.arg)
        targets = []
        if rule.each:
            if isinstance(value, list):
                targets = [(f"{base}.{i}", v, i) for i, v in enumerate(value)]
        else:
            targets = [(base, value, None)]
        for path, enc, i in targets:
            if not (isinstance(enc, dict) and "T" in enc):
                continue
            c = _constraint(rule, enc, args, kwargs, i)
            if c is not None:
                out[path] = c
    return out


def _constraint(rule: SemanticRule, enc: dict, args: list, kwargs: dict, i: int | None) -> dict | None:
    kind = rule.kind
    if kind == "offsets":
        high = _bound(rule, args, kwargs, i)
        return None if high is None else {"kind": "offsets", "high": int(high), "source": "semantics"}
    if kind == "mask" or (kind == "index" and enc["dt"] == "b8"):
        if enc["dt"] != "b8":
            return None
        c = {"kind": "mask", "density": 0.5, "source": "semantics"}
        count = _mask_count(rule.mask_count, enc, args, kwargs, i)
        if count is not None:
            spec = rule.mask_count
            c.update(count=count, count_of=_path(spec.numel_of if spec.values_of is None else spec.values_of))
        return c
    if kind == "index":
        high = _bound(rule, args, kwargs, i)
        if high is None:
            return None
        c: dict[str, Any] = {"kind": "index", "low": 0, "high": max(high, 1), "source": "semantics"}
        special = _special(rule.special, args, kwargs)
        if special is not None:
            c["special"] = [special]
        unique = rule.unique
        if rule.unique_unless is not None:
            unique = not bool(_arg(args, kwargs, rule.unique_unless))
        if unique:
            dim_arg = rule.high.dim_arg if isinstance(rule.high, Bound) else None
            c["unique_dim"] = _arg(args, kwargs, dim_arg) if dim_arg is not None else None
            c["unique"] = True
        return c
    if kind == "range":
        return {
            "kind": "range",
            "low": rule.low,
            "high": rule.high if isinstance(rule.high, int) else 8,
            "source": "semantics",
        }
    return {"kind": kind, "source": "semantics"}


def _bound(rule: SemanticRule, args: list, kwargs: dict, i: int | None) -> int | None:
    """The resolved upper bound of an index/offsets rule (None: the call does not fix one)."""
    return _resolve_high(rule.high, args, kwargs, i) if isinstance(rule.high, Bound) else None


def _mask_count(spec: MaskCount | None, mask: dict, args: list, kwargs: dict, i: int | None) -> int | None:
    """The True count a boolean mask must have so that the call is valid (None: any count fits, or
    the call does not fix one)."""
    if not spec:
        return None
    if spec.numel_of is not None:
        return _fitting_count(spec, mask, args, kwargs)
    return _selected_count(spec, mask, args, kwargs, i)


def _numel_of(value: Any) -> int | None:
    """Elements of an encoded tensor, or the product of a list of sizes (masked_scatter_backward)."""
    if isinstance(value, dict) and "T" in value:
        sizes = value["T"]
    elif isinstance(value, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        sizes = value
    else:
        return None
    n = 1
    for s in sizes:
        n *= int(s)
    return n


def _fitting_count(spec: MaskCount, mask: dict, args: list, kwargs: dict) -> int | None:
    """The most Trues a mask can have when, broadcast with another tensor, it selects at most the
    elements of a third argument (masked_scatter's source, masked_scatter_backward's sizes,
    masked_select_backward's grad): the count a valid call had, whichever values it held."""
    cap = _numel_of(_arg(args, kwargs, spec.numel_of))
    mask_numel = _numel_of(mask)
    if cap is None or not mask_numel:
        return None
    per_true = 1  # the elements one True selects: the broadcast shape's numel over the mask's
    other = _arg(args, kwargs, spec.broadcast_with) if spec.broadcast_with is not None else None
    if isinstance(other, dict) and "T" in other:
        try:
            shape = torch.broadcast_shapes(tuple(mask["T"]), tuple(other["T"]))
        except RuntimeError:
            return None
        per_true = max(1, _numel_of({"T": list(shape)}) // mask_numel)
    return min(mask_numel, cap // per_true)


def _selected_count(spec: MaskCount, mask: dict, args: list, kwargs: dict, i: int | None) -> int | None:
    """The True count a boolean index must have so that the values written fit (index_put: the
    selected elements are ``self[..., mask, ...]``, shape ``self[:d] + [nnz] + self[d + mask.dim:]``,
    and the values must broadcast to it). None when any count fits (the values broadcast along the
    selected position) or the call is not of that simple form (several advanced indices)."""
    if i is None:
        return None
    target, indices, values = (
        _arg(args, kwargs, 0),
        _arg(args, kwargs, 1),
        _arg(args, kwargs, spec.values_of),
    )
    if not (
        isinstance(target, dict)
        and "T" in target
        and isinstance(values, dict)
        and "T" in values
        and isinstance(indices, list)
    ):
        return None
    if any(isinstance(x, dict) and "T" in x for j, x in enumerate(indices) if j != i):
        return None  # several advanced indices broadcast together: not derived
    d, m, v = i, len(mask["T"]), values["T"]  # entries before i are None (one full dim each)
    rank = len(target["T"]) - m + 1
    k = d - (rank - len(v))  # the selected position in the values, aligned from the right
    if not 0 <= k < len(v) or int(v[k]) == 1:
        return None
    count = int(v[k])
    numel = 1
    for s in mask["T"]:
        numel *= int(s)
    return count if count <= numel else None


def _special(spec: Special | None, args: list, kwargs: dict) -> int | None:
    """A value with a meaning of its own (padding index, ignore index) that replay plants as a
    boundary value; None when the call has none (e.g. padding_idx -1, below `min`)."""
    if not spec:
        return None
    value = _arg(args, kwargs, spec.value_of)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value if spec.min is None or value >= spec.min else None


def observe_constraints(args: tuple, kwargs: dict | None, known: dict[str, dict]) -> dict[str, dict]:
    """Constraints from real values (recording on real tensors): integer ranges, mask densities.

    Only for tensors the semantics left unconstrained; cheap reductions, run once per new signature.
    """
    out: dict[str, dict] = {}
    flat = [(f"a.{i}", a) for i, a in enumerate(args)] + [(f"k.{k}", v) for k, v in (kwargs or {}).items()]
    for base, value in flat:
        items = (
            [(f"{base}.{j}", v) for j, v in enumerate(value)]
            if isinstance(value, (list, tuple))
            else [(base, value)]
        )
        for path, t in items:
            if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or path in known:
                continue  # (floats are never observed: see _observe)
            if t.numel() == 0 or t.is_meta:
                continue
            if type(t).__name__ == "FakeTensor":  # no values (a device tensor has: recorded on the device)
                continue
            c = _observe(t)
            if c:
                out[path] = c
    return out


def _observe(t: torch.Tensor) -> dict | None:
    if t.device.type != "cpu" and (
        t.dtype == torch.bool or not (t.dtype.is_floating_point or t.dtype.is_complex)
    ):
        t = t.to("cpu")  # one copy per new signature; the reductions then cost the device nothing
    with torch.no_grad():
        if t.dtype == torch.bool:
            count = int(t.sum())  # exact: masked_scatter / boolean index_put need this many Trues
            return {
                "kind": "mask",
                "density": round(count / t.numel(), 3),
                "count": count,
                "source": "observed",
            }
        if not t.dtype.is_floating_point and not t.dtype.is_complex:
            lo, hi = int(t.min()), int(t.max())
            return {"kind": "range", "low": lo, "high": hi + 1, "source": "observed"}
    return None  # floats: positivity etc. come from the op's semantics (cheaper, and fake-safe)
