"""Is a device's tensor right? The gate of the `numerics` and `compile` stages, the dynamo way.

`compare(actual, reference, eager)`: pass when allclose with the tolerance of the class the tensor
was computed in; else when the device's RMSE against the float64 reference is within a multiple of
the CPU float32 eager RMSE (the fp64-RMSE gate of `torch._dynamo.utils.same`: a model whose float32
math is inherently noisy is not blamed on the device); else fail. Cosine similarity decides only
where a documented rule (data/numerics.yaml `cosine_rules`) asks for it. `compare_named` compares
many named tensors (outputs, parameter gradients) and reports the worst by name.

The tolerance class follows what the device computes in (data/numerics.yaml says why each
threshold is what it is); harness/stages/reference.py makes the reference compute the same way.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from pydantic import Field, field_validator, model_validator

from contracts.rulefiles import Rules, cached_rules, resource
from contracts.tolerance import Tolerance

#: how a passing comparison passed, weakest last (the weakest used by any tensor is reported)
METHODS = ("empty", "allclose", "rmse", "cosine")

#: the tolerance classes a tensor can be judged by (`tolerance_class`), each in data/numerics.yaml
CLASSES = ("float32", "bfloat16", "float16", "float64", "undeclared_rounding")


class CosineRule(Rules):
    """A documented exception: tensors that may pass on cosine similarity after the RMSE gate failed."""

    architecture: str = "*"  # glob over the model's architecture
    tensor: str = "*"  # glob over the tensor's name
    min: float
    reason: str


class NumericsRules(Rules):
    """harness/data/numerics.yaml: the gate's tolerance per class and its RMSE-gate settings."""

    version: int
    classes: dict[str, Tolerance]
    rmse_multiplier_small: float = Field(ge=0)
    small_numel: int = Field(ge=0)
    cosine_rules: tuple[CosineRule, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _name_classes(cls, data: Any) -> Any:
        """Each class's Tolerance carries its name (metrics and reasons say which class judged)."""
        if isinstance(data, dict) and isinstance(data.get("classes"), dict):
            data = {
                **data,
                "classes": {
                    k: {"name": k, **v} if isinstance(v, dict) else v for k, v in data["classes"].items()
                },
            }
        return data

    @field_validator("classes")
    @classmethod
    def _every_class(cls, classes: dict[str, Tolerance]) -> dict[str, Tolerance]:
        missing = [c for c in CLASSES if c not in classes]
        if missing:
            raise ValueError(f"no tolerance for the classes {missing}")
        return classes


def settings() -> NumericsRules:
    """The numerics gate's rules (harness/data/numerics.yaml), read once per process."""
    return cached_rules(NumericsRules, str(resource("harness", "data/numerics.yaml")))


@functools.cache
def tolerance(cls: str) -> Tolerance:
    """The numerics gate's tolerance of a class (one of CLASSES), from harness/data/numerics.yaml."""
    return settings().classes[cls]


def tolerance_class(dtype: torch.dtype, *, undeclared_rounding: bool = False) -> str:
    """The class of a tensor of `dtype`: its own dtype's, unless the device rounds in a way the
    reference could not follow (a reduced-precision mode without declared rounded inputs)."""
    name = str(dtype).replace("torch.", "")
    if name in ("bfloat16", "float16", "float64"):
        return name
    return "undeclared_rounding" if undeclared_rounding else "float32"


def tolerance_of(dtype: torch.dtype, *, undeclared_rounding: bool = False) -> Tolerance:
    """The tolerance the numerics gate judges a tensor of `dtype` by (its class's, data/numerics.yaml):
    the stable entry point for anything that judges a value as the gate would (one op's output too)."""
    return tolerance(tolerance_class(dtype, undeclared_rounding=undeclared_rounding))


@dataclass
class TensorComparison:
    """A device's tensor (or a group of them: the worst decides) against the float64 reference,
    with the CPU float32 eager run as the yardstick. Not registry.replay.OpComparison (an op call's
    outputs against the CPU's) nor reports.compare.RunComparison (a run against a baseline)."""

    passed: bool
    method: str  # allclose | rmse | cosine | shape | nonfinite | empty | missing
    name: str = ""  # the (worst) tensor: an output path like "logits", or a parameter name
    max_abs_error: float = 0.0
    rmse: float = 0.0  # device vs float64
    eager_rmse: float = 0.0  # CPU float32 eager vs float64
    allowed_rmse: float = 0.0  # what the RMSE gate accepts (0: no eager yardstick)
    cosine: float | None = None  # only computed where a cosine rule applies
    tensors: int = 0
    tolerance_class: str = ""
    reason: str = ""

    @property
    def ratio(self) -> float:
        """rmse / allowed_rmse: how close the tensor came to failing the RMSE gate (> 1 fails)."""
        if self.method in ("shape", "nonfinite", "missing"):
            return math.inf
        if self.allowed_rmse > 0:
            return self.rmse / self.allowed_rmse
        return 0.0 if self.passed else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            k: (round(v, 10) if isinstance(v, float) and math.isfinite(v) else v)
            for k, v in asdict(self).items()
        }


# --------------------------------------------------------------------------------- tensors


def named_tensors(output: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of every tensor of a model output in a stable order: ModelOutput and dict
    keys, tuple/list indices ("logits", "hidden_states[2]", "output[0]")."""
    out: list[tuple[str, torch.Tensor]] = []

    def walk(x: Any, name: str) -> None:
        if isinstance(x, torch.Tensor):
            out.append((name or "output", x))
        elif isinstance(x, dict):
            for k in x:
                walk(x[k], f"{name}.{k}" if name else str(k))
        elif hasattr(x, "to_tuple"):
            for i, v in enumerate(x.to_tuple()):
                walk(v, f"{name or 'output'}[{i}]")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{name or 'output'}[{i}]")

    walk(output, prefix)
    return out


def named_float_tensors(output: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """`named_tensors`, the floating (and complex) ones: what numerics compare."""
    return [(n, t) for n, t in named_tensors(output, prefix) if t.is_floating_point() or t.is_complex()]


def float_tensors(output: Any) -> list[torch.Tensor]:
    """Floating tensors of a model output in a stable order (ModelOutput, tuple, dict, tensor)."""
    return [t for _, t in named_float_tensors(output)]


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean((a - b).abs() ** 2))) if a.numel() else 0.0


def _cosine_rule(architecture: str, name: str) -> CosineRule | None:
    for rule in settings().cosine_rules:
        if fnmatch.fnmatchcase(architecture or "", rule.architecture) and fnmatch.fnmatchcase(
            name, rule.tensor
        ):
            return rule
    return None


# --------------------------------------------------------------------------------- the gate


def compare(
    actual: torch.Tensor,
    reference: torch.Tensor,
    eager: torch.Tensor | None = None,
    *,
    name: str = "",
    tol: Tolerance | None = None,
    architecture: str = "",
    cosine: bool = True,
) -> TensorComparison:
    """One tensor against the float64 reference; `eager` is the CPU float32 run (the yardstick)."""
    tol = tol or tolerance_of(actual.dtype)
    base = {"name": name, "tensors": 1, "tolerance_class": tol.name}
    if actual.shape != reference.shape:
        return TensorComparison(
            False, "shape", reason=f"{name}: shape {tuple(actual.shape)} != {tuple(reference.shape)}", **base
        )
    a = actual.detach().cpu().to(torch.float64)
    r = reference.detach().cpu().to(torch.float64)
    if a.numel() == 0:
        return TensorComparison(True, "empty", **base)
    finite_r = torch.isfinite(r)
    if not torch.equal(torch.isfinite(a), finite_r):
        return TensorComparison(
            False, "nonfinite", reason=f"{name}: non-finite values differ from the reference", **base
        )
    a, r = a[finite_r], r[finite_r]
    max_abs = float((a - r).abs().max()) if a.numel() else 0.0
    rmse = _rmse(a, r)
    eager_rmse, allowed = 0.0, 0.0
    if eager is not None and eager.shape == reference.shape:
        e = eager.detach().cpu().to(torch.float64)[finite_r]
        eager_rmse = _rmse(e, r)
        s = settings()
        mult = (
            max(tol.rmse_multiplier, s.rmse_multiplier_small)
            if a.numel() <= s.small_numel
            else tol.rmse_multiplier
        )
        allowed = mult * eager_rmse + tol.atol / 10.0
    found = dict(max_abs_error=max_abs, rmse=rmse, eager_rmse=eager_rmse, allowed_rmse=allowed, **base)
    if torch.allclose(a, r, rtol=tol.rtol, atol=tol.atol):
        return TensorComparison(True, "allclose", **found)
    if allowed and rmse <= allowed:
        return TensorComparison(True, "rmse", **found)
    why = (
        f"{name}: max abs error {max_abs:.3g}, rmse {rmse:.3g} vs float32 eager {eager_rmse:.3g} "
        f"(allowed {allowed:.3g})"
        if allowed
        else f"{name}: max abs error {max_abs:.3g} beyond rtol={tol.rtol:g} atol={tol.atol:g} "
        "(no eager yardstick)"
    )
    rule = _cosine_rule(architecture, name) if cosine else None
    if rule is not None:
        cos = (
            float(torch.nn.functional.cosine_similarity(a.flatten(), r.flatten(), dim=0, eps=1e-12))
            if a.numel() > 1
            else 0.0
        )
        if cos >= rule.min:
            return TensorComparison(True, "cosine", cosine=cos, reason=f"cosine rule: {rule.reason}", **found)
        return TensorComparison(
            False, "cosine", cosine=cos, reason=f"{why}, cosine {cos:.6f} < {rule.min}", **found
        )
    return TensorComparison(False, "rmse", reason=why, **found)


def worst(results: Iterable[TensorComparison]) -> TensorComparison:
    """The comparison that decides a group: the worst failure, else the one closest to failing,
    carrying the group's size and the weakest method any tensor needed."""
    results = list(results)
    if not results:
        return TensorComparison(True, "empty", reason="no floating tensors")
    failed = [c for c in results if not c.passed]
    pick = max(failed or results, key=lambda c: (c.ratio, c.max_abs_error))
    out = TensorComparison(**{k: getattr(pick, k) for k in TensorComparison.__dataclass_fields__})
    out.tensors = sum(c.tensors for c in results)
    if out.passed:
        out.method = max((c.method for c in results), key=METHODS.index)
    return out


def compare_named(
    actual: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    eager: dict[str, torch.Tensor] | None = None,
    *,
    undeclared_rounding: bool = False,
    architecture: str = "",
) -> TensorComparison:
    """Tensors matched by name (outputs, parameter gradients); one missing on either side fails."""
    missing = sorted(set(actual) ^ set(reference))
    if missing:
        n = missing[0]
        side = "the reference" if n in actual else "the device"
        return TensorComparison(
            False, "missing", name=n, tensors=len(reference), reason=f"{n}: missing on {side}"
        )
    eager = eager or {}
    return worst(
        compare(
            actual[n],
            reference[n],
            eager.get(n),
            name=n,
            architecture=architecture,
            tol=tolerance_of(actual[n].dtype, undeclared_rounding=undeclared_rounding),
        )
        for n in reference
    )


def compare_outputs(actual: Any, reference: Any, eager: Any = None, **kwargs: Any) -> TensorComparison:
    """Every floating tensor of two model outputs, by position (the names are the reference's)."""
    acts, refs = named_float_tensors(actual), named_float_tensors(reference)
    if len(acts) != len(refs):
        return TensorComparison(
            False, "shape", reason=f"{len(acts)} output tensors != {len(refs)} in the reference"
        )
    eags = named_float_tensors(eager) if eager is not None else []
    names = [n for n, _ in refs]
    return compare_named(
        dict(zip(names, (t for _, t in acts))),
        dict(refs),
        dict(zip(names, (t for _, t in eags))) if len(eags) == len(refs) else None,
        **kwargs,
    )


def compare_with_eager(
    actual: dict[str, torch.Tensor],
    eager: dict[str, torch.Tensor],
    truth: Callable[[], dict[str, torch.Tensor]] | None = None,
    *,
    undeclared_rounding: bool = False,
    architecture: str = "",
) -> TensorComparison:
    """A compiled run against the eager run on the same device, as dynamo's `same(eager, compiled,
    fp64_ref)`: each tensor allclose to eager's; else the RMSE gate against the float64 truth, with
    eager's own distance from the truth as the yardstick. `truth` (name -> tensor) is called only
    when some tensor needs it."""
    missing = sorted(set(actual) ^ set(eager))
    if missing:
        n = missing[0]
        return TensorComparison(
            False,
            "missing",
            name=n,
            tensors=len(eager),
            reason=f"{n}: missing in the {'eager' if n in actual else 'compiled'} run",
        )
    results, reference = [], None
    for n in eager:
        tol = tolerance_of(actual[n].dtype, undeclared_rounding=undeclared_rounding)
        c = compare(actual[n], eager[n], name=n, tol=tol, cosine=False)
        if not c.passed and c.method == "rmse" and truth is not None:
            reference = truth() if reference is None else reference
            if n in reference:
                c = compare(actual[n], reference[n], eager[n], name=n, tol=tol, architecture=architecture)
        results.append(c)
    return worst(results)
