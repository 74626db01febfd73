"""Could a failed comparison come from a choice among near-ties? Evidence for whoever reads the row.

A model that picks with `topk`, `argmax`, `max(dim)` or `kthvalue` hinges on a discrete choice.
When the candidates at the choice's boundary are closer than one rounding step of the device, two
correct computations (eager and compiled, the device and the CPU) may pick differently, and what
follows the pick differs by far more than any tolerance. A shrunk model with random weights does
this easily: RT-DETR's query selection (`topk(8)` of 84 encoder scores 4e-4 apart), the point
sampling of Mask2Former's loss (`topk` of 37,632 uncertainties), an MoE router's top-8 of 64.

A near-tie alone proves nothing: most MoE routers have one somewhere, and a real device fault in
such a model must stay the device's. So the probe asks the counterfactual on the CPU
(`nudged_difference`): the failed stage's step runs twice, as it is and with every near-tie
selection's input nudged by up to one rounding step (the choice made on the nudged values, the
values taken from the real ones). When the flips alone move the tensor the comparison failed on
beyond what that comparison allowed, and by an error of the device's order (at least
`reproduce_share` of it, blame_rules' `probe.selection_ties`), a flip alone would fail the
comparison.

That is evidence, not a verdict: the blame stays `backend`, and the row carries what the probe
found (`blame_evidence.selection_ties`, and a sentence in `why`). Making it the harness' verdict
was tried and measured: Inkling2's MoE router (top-8 of 16, 6e-5 apart) passes the compile stage
on a healthy device, yet a nudge of its choices moves the logits by 10x what the planted
`compiled-softmax-1pct` fault does; excusing such rows hid 2 of the 5 compile faults the
representative tier catches. A flip the device really made and a fault that a flip would look
like cannot be told apart from the CPU.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from agents.quiet import quiet_transformers
from contracts.status import Status
from harness.blame import rules as rules_mod
from harness.errors import NoLoss
from harness.stages.compare import named_float_tensors
from harness.stages.compile import worst_compared
from harness.stages.step import parameter_grads, train_mode, training_loss

_aten = torch.ops.aten
#: the ops whose result is a choice among their input's values
_SELECTIONS = {
    _aten.topk.default: "topk",
    _aten.argmax.default: "argmax",
    _aten.argmin.default: "argmin",
    _aten.max.dim: "max",
    _aten.min.dim: "min",
    _aten.kthvalue.default: "kthvalue",
}

_MAX_PENDING = 4096  # index tensors held until read (a forward makes a few dozen selections at most)


@dataclass(frozen=True)
class Selection:
    """The closest call of one selection op: its margin and where the model made it."""

    op: str
    margin: float  # relative gap at the choice's boundary (0: an exact tie)
    k: int
    candidates: int
    where: str  # the model's line (file:line), "" when not found

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _settings() -> rules_mod.SelectionTies:
    return rules_mod.rules().probe.selection_ties


def _threshold(settings: rules_mod.SelectionTies) -> float:
    """The relative gap below which a choice is a near-tie (default: one bf16 step, 2^-8)."""
    return settings.relative_margin


def _rows(x: torch.Tensor, dim: int | None) -> torch.Tensor:
    """The values a selection chooses among, one row per choice."""
    if dim is None or x.dim() == 0:
        return x.reshape(1, -1)
    return x.movedim(dim, -1).reshape(-1, x.shape[dim])


def margin(x: torch.Tensor, k: int, dim: int | None, largest: bool, kth: bool = False) -> float | None:
    """The smallest relative gap, over every row, between the k-th value chosen and the next one
    (for `kthvalue`, either neighbour of the k-th smallest); None when nothing is decided (k covers
    the row, or no two finite candidates)."""
    if not x.is_floating_point() or x.numel() == 0:
        return None
    rows = _rows(x.detach().to(torch.float64), dim)
    n = rows.shape[-1]
    if n < 2 or k < 1 or (k >= n and not kth):
        return None
    ordered = rows.sort(dim=-1, descending=largest and not kth).values
    pairs = [(k - 1, k)] if not kth else [(i, i + 1) for i in (k - 2, k - 1) if i >= 0 and i + 1 < n]
    best: float | None = None
    for i, j in pairs:
        a, b = ordered[:, i], ordered[:, j]
        finite = torch.isfinite(a) & torch.isfinite(b)
        if not bool(finite.any()):
            continue
        a, b = a[finite], b[finite]
        scale = torch.maximum(a.abs(), b.abs()).clamp_min(torch.finfo(torch.float32).tiny)
        m = float(((a - b).abs() / scale).min())
        best = m if best is None else min(best, m)
    return best


def _dim_of(name: str, args: tuple, kwargs: dict) -> int | None:
    """The dimension a selection chooses along (None: `argmax`/`argmin` over the whole tensor)."""
    if name in ("topk", "kthvalue"):
        return int(args[2] if len(args) > 2 else kwargs.get("dim", -1))
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    return None if dim is None else int(dim)


def _call_margin(name: str, args: tuple, kwargs: dict) -> tuple[float | None, int, int]:
    x, dim = args[0], _dim_of(name, args, kwargs)
    n = x.numel() if dim is None or x.dim() == 0 else x.shape[dim]
    if name == "topk":
        k = int(args[1] if len(args) > 1 else kwargs["k"])
        largest = bool(args[3] if len(args) > 3 else kwargs.get("largest", True))
        return margin(x, k, dim, largest), k, n
    if name == "kthvalue":
        k = int(args[1] if len(args) > 1 else kwargs["k"])
        return margin(x, k, dim, False, kth=True), k, n
    return margin(x, 1, dim, name in ("argmax", "max")), 1, n


class _Selections(TorchDispatchMode):
    """Record the closest call of each selection op made by model code whose choice is used, and
    with `nudge` > 0 make every near-tie choice on nudged values.

    Only the indices are a discrete choice: the values of `max(dim)` or `topk` are continuous in
    their input (`x - x.max(-1).values`, the softmax shift, ties or not). A call counts once a
    later op of the forward reads its indices (a gather, an index, a view, `.item()`); the
    backward reading them to route a gradient (`max`'s backward) does not count."""

    def __init__(self, threshold: float, nudge: float = 0.0, seed: int = 0) -> None:
        super().__init__()
        self.threshold, self.nudge = threshold, nudge
        self.generator = torch.Generator().manual_seed(seed)
        self.closest: dict[str, Selection] = {}
        self.pending: dict[int, tuple[torch.Tensor, Selection]] = {}  # id(indices) -> (indices, call)

    def _used(self, values: Any) -> None:
        for t in tree_leaves(values):
            if isinstance(t, torch.Tensor) and id(t) in self.pending:
                held, call = self.pending.pop(id(t))
                if held is t and (call.op not in self.closest or call.margin < self.closest[call.op].margin):
                    self.closest[call.op] = call

    def _nudged_choice(self, func, name: str, args: tuple, kwargs: dict) -> Any:
        """The op chosen on values nudged by up to `nudge` (relative), its values the real ones."""
        x = args[0]
        noise = torch.rand(x.shape, generator=self.generator, dtype=torch.float64) * 2 - 1
        nudged = (x.to(torch.float64) * (1 + self.nudge * noise)).to(x.dtype)
        out = func(nudged, *args[1:], **kwargs)
        if name in ("argmax", "argmin"):
            return out
        indices = out[1]
        dim = _dim_of(name, args, kwargs)
        keep = name == "topk" or bool(
            args[3]
            if name == "kthvalue" and len(args) > 3
            else args[2]
            if name in ("max", "min") and len(args) > 2
            else kwargs.get("keepdim", False)
        )
        values = x.gather(dim, indices if keep else indices.unsqueeze(dim))
        return (values if keep else values.squeeze(dim)), indices

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.pending:
            self._used((args, kwargs))
        name = _SELECTIONS.get(func)
        if name is None or not isinstance(args[0], torch.Tensor):
            return func(*args, **kwargs)
        m, k, n = _call_margin(name, args, kwargs)
        near = m is not None and m <= self.threshold
        out = (
            self._nudged_choice(func, name, args, kwargs)
            if near and self.nudge > 0
            else func(*args, **kwargs)
        )
        indices = out if name in ("argmax", "argmin") else out[1]
        if near and isinstance(indices, torch.Tensor) and len(self.pending) < _MAX_PENDING:
            self.pending[id(indices)] = (indices, Selection(name, m, k, n, _model_line()))
        return out


_MODEL_CODE = f"{os.sep}transformers{os.sep}models{os.sep}"


def _model_line() -> str:
    """The innermost model-code frame of the current call (``transformers/models/...py:LINE``)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        at = name.find(_MODEL_CODE)
        if at >= 0:
            return f"{name[at + 1 :]}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _step(
    cpu_model: torch.nn.Module, cpu_kwargs: dict, seed: int, train: bool, spy: _Selections
) -> dict[str, torch.Tensor]:
    """One step as the stages run it, on a copy of the CPU model: "output <name>", "loss" and
    "gradient of <parameter>" -> tensor (float64)."""
    model = copy.deepcopy(cpu_model)
    values: dict[str, torch.Tensor] = {}
    torch.manual_seed(seed)
    with train_mode(model) if train else contextlib.nullcontext(), quiet_transformers():
        with spy:  # the forward's choices; the backward only routes gradients through them
            out = model(**cpu_kwargs)
            try:
                loss, _ = training_loss(out)
            except NoLoss:
                loss = None
        values.update({f"output {n}": t.detach().to(torch.float64) for n, t in named_float_tensors(out)})
        if loss is None:
            return values
        loss.backward()
    values["loss"] = loss.detach().to(torch.float64)
    values.update(
        {f"gradient of {n}": g.detach().to(torch.float64) for n, g in parameter_grads(model).items()}
    )
    return values


def _failed_tensor(stage: str, metrics: dict[str, Any]) -> tuple[str, float, float]:
    """The tensor a failed comparison names ("output x", "gradient of p", "loss"), the device's
    RMSE in it and the RMSE the comparison allowed (0 when it failed on shape or non-finite
    values, or had no yardstick)."""
    if stage == "compile":
        name, _, rmse, allowed = worst_compared(metrics)
        return name, float(rmse or 0.0), float(allowed or 0.0)
    if metrics.get("passed") is False:
        found = metrics
        name = f"output {metrics.get('name', '')}"
    else:
        found = metrics.get("gradients") or {}
        name = f"gradient of {found.get('name', '')}"
    return name, float(found.get("rmse") or 0.0), float(found.get("allowed_rmse") or 0.0)


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    finite = torch.isfinite(a) & torch.isfinite(b)
    return float((a[finite] - b[finite]).pow(2).mean().sqrt()) if bool(finite.any()) else 0.0


@dataclass(frozen=True)
class NudgeFinding:
    """What nudging the near-tie choices did to the tensor the comparison failed on."""

    selections: list[Selection]
    tensor: str
    nudged_rmse: float  # nudged step vs the step as it is (CPU); 0 when no choice flipped
    device_rmse: float
    allowed_rmse: float  # what the failed comparison allowed
    shape_changed: bool

    def reproduces(self, share: float) -> bool:
        """The flips alone fail the same gate, by an error of the device's order (a fault far
        larger than anything a flip does stays the device's)."""
        if self.shape_changed:
            return True
        return (
            self.nudged_rmse > self.allowed_rmse
            and self.device_rmse > 0
            and self.nudged_rmse >= share * self.device_rmse
        )


def nudged_difference(
    cpu_model: torch.nn.Module,
    cpu_kwargs: dict,
    seed: int,
    train: bool,
    tensor: str,
    device_rmse: float,
    allowed_rmse: float = 0.0,
) -> NudgeFinding | None:
    """The step as it is and with its near-tie choices made on nudged values; None when the
    model makes no near-tie choice (or the failed tensor is not among the step's)."""
    settings = _settings()
    threshold = _threshold(settings)
    spy = _Selections(threshold)
    base = _step(cpu_model, cpu_kwargs, seed, train, spy)
    found = sorted(spy.closest.values(), key=lambda c: c.margin)
    if not found or tensor not in base:
        return None
    nudged = _step(cpu_model, cpu_kwargs, seed, train, _Selections(threshold, nudge=threshold, seed=seed))
    a, b = base[tensor], nudged.get(tensor)
    if b is None or a.shape != b.shape:
        return NudgeFinding(found, tensor, 0.0, device_rmse, allowed_rmse, True)
    return NudgeFinding(found, tensor, _rmse(a, b), device_rmse, allowed_rmse, False)


def selection_ties_evidence(run: Any, stage: str) -> dict[str, Any] | None:
    """For a comparison failure (`fail`, not an error) of a stage that compares values: what
    nudging the model's near-tie choices by one rounding step does on the CPU; None when the model
    makes no near-tie choice the failure could hinge on (or the probe cannot run)."""
    settings = _settings()
    row = run.result.stages.get(stage)
    if row is None or stage not in settings.stages or row.status != Status.FAIL:
        return None
    if run.cpu_model is None:
        return None
    metrics = row.metrics or {}
    tensor, device_rmse, allowed_rmse = _failed_tensor(stage, metrics)
    train = metrics.get("mode", "train") == "train"
    try:
        finding = nudged_difference(
            run.cpu_model, run.cpu_kwargs, run.seed, train, tensor, device_rmse, allowed_rmse
        )
    except Exception:  # noqa: BLE001 - a probe that cannot run says nothing
        return None
    if finding is None:
        return None
    share = settings.reproduce_share
    first = finding.selections[0]
    reproduces = finding.reproduces(share)
    return {
        "selections": [c.to_dict() for c in finding.selections[:3]],
        "tensor": tensor,
        "nudged_rmse": finding.nudged_rmse,
        "device_rmse": device_rmse,
        "allowed_rmse": allowed_rmse,
        "shape_changed": finding.shape_changed,
        "flips_reproduce": reproduces,
        "relative_margin": _threshold(settings),
        "note": (
            f"the model's answer hinges on a choice among near-ties ({first.op} at "
            f"{first.where or 'an unknown line'}, margin {first.margin:.3g}); nudging those choices' inputs "
            f"by one rounding step moves {tensor} by rmse {finding.nudged_rmse:.3g} on the CPU (the device: "
            f"{device_rmse:.3g}, allowed {allowed_rmse:.3g})"
            + (
                ": a flip alone fails this comparison, so check whether the device's failure is one"
                if reproduces
                else ": the flips alone do not explain the failure"
            )
        ),
    }
