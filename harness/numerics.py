"""Is a device's output right? Compare it with a CPU float64 reference, the dynamo way.

`compare(actual, reference64, eager)`: pass when allclose with the dtype's tolerance; else when
the device's RMSE against float64 is within a multiple of the eager CPU float32 RMSE (so a model
whose float32 math is inherently noisy is not blamed on the device); else when the cosine
similarity is high. Thresholds live in data/numerics.yaml.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import torch
import yaml


@lru_cache(maxsize=1)
def settings() -> dict[str, Any]:
    return yaml.safe_load(resources.files("harness").joinpath("data/numerics.yaml").read_text())


@dataclass
class Comparison:
    passed: bool
    method: str  # allclose | rmse | cosine | shape | nonfinite | empty
    max_abs_error: float = 0.0
    rmse: float = 0.0  # device vs float64
    eager_rmse: float = 0.0  # eager CPU float32 vs float64
    cosine: float = 1.0
    tensors: int = 0
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 8) if isinstance(v, float) and math.isfinite(v) else v) for k, v in asdict(self).items()}


def float_tensors(output: Any) -> list[torch.Tensor]:
    """Floating tensors of a model output in a stable order (ModelOutput, tuple, dict, tensor)."""
    out: list[torch.Tensor] = []

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            if x.is_floating_point() or x.is_complex():
                out.append(x)
        elif hasattr(x, "to_tuple"):
            walk(x.to_tuple())
        elif isinstance(x, dict):
            for k in x:
                walk(x[k])
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(output)
    return out


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean((a - b).abs() ** 2)))


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    t = settings()["tolerances"].get(str(dtype).replace("torch.", ""), settings()["tolerances"]["float32"])
    return float(t["rtol"]), float(t["atol"])


def compare(actual: torch.Tensor, reference: torch.Tensor, eager: torch.Tensor | None = None) -> Comparison:
    s = settings()
    if actual.shape != reference.shape:
        return Comparison(False, "shape", reason=f"shape {tuple(actual.shape)} != {tuple(reference.shape)}")
    a = actual.detach().cpu().to(torch.float64)
    r = reference.detach().cpu().to(torch.float64)
    if a.numel() == 0:
        return Comparison(True, "empty", tensors=1)
    finite_r = torch.isfinite(r)
    if not torch.equal(torch.isfinite(a), finite_r):
        return Comparison(False, "nonfinite", reason="non-finite values differ from the reference", tensors=1)
    a, r = a[finite_r], r[finite_r]
    rtol, atol = tolerance(actual.dtype)
    max_abs = float((a - r).abs().max()) if a.numel() else 0.0
    rmse = _rmse(a, r) if a.numel() else 0.0
    if torch.allclose(a, r, rtol=rtol, atol=atol):
        return Comparison(True, "allclose", max_abs, rmse, tensors=1)
    eager_rmse = 0.0
    if eager is not None and eager.shape == reference.shape:
        e = eager.detach().cpu().to(torch.float64)[finite_r]
        eager_rmse = _rmse(e, r) if e.numel() else 0.0
        mult = s["rmse_multiplier_small"] if a.numel() <= s["small_numel"] else s["rmse_multiplier"]
        if rmse <= mult * eager_rmse + atol / 10.0:
            return Comparison(True, "rmse", max_abs, rmse, eager_rmse, tensors=1)
    cos = float(torch.nn.functional.cosine_similarity(a.flatten(), r.flatten(), dim=0, eps=1e-12)) if a.numel() > 1 else 0.0
    if cos >= s["cosine_min"]:
        return Comparison(True, "cosine", max_abs, rmse, eager_rmse, cos, tensors=1)
    return Comparison(False, "cosine", max_abs, rmse, eager_rmse, cos, tensors=1,
                      reason=f"max abs error {max_abs:.3g}, rmse {rmse:.3g} vs eager {eager_rmse:.3g}, cosine {cos:.4f}")


def compare_outputs(actual: Any, reference: Any, eager: Any = None) -> Comparison:
    """Compare every floating tensor of two model outputs; the worst one decides."""
    acts, refs = float_tensors(actual), float_tensors(reference)
    eags = float_tensors(eager) if eager is not None else [None] * len(refs)
    if len(acts) != len(refs):
        return Comparison(False, "shape", reason=f"{len(acts)} output tensors != {len(refs)} in the reference")
    if not refs:
        return Comparison(True, "empty", reason="no floating outputs")
    results = [compare(a, r, e) for a, r, e in zip(acts, refs, eags)]
    worst = next((c for c in results if not c.passed), None) or max(results, key=lambda c: c.max_abs_error)
    worst.tensors = len(results)
    if worst.passed:
        order = ["empty", "allclose", "rmse", "cosine"]
        worst.method = max((c.method for c in results), key=order.index)
    return worst
