"""Check one model on one backend, stage by stage.

    >>> from harness.check import check_model
    >>> from contracts.records import ModelSpec
    >>> result = check_model(ModelSpec("catalog/bert", "bert", "BertForMaskedLM"), backend="neuron")
    >>> result.stages["forward"].status
    <Status.PASS: 'pass'>

Stages run in MODEL_STAGES order: load (shrink, build with seeded random weights, move to the
device), forward, backward (loss.backward with gradients on the device), compile (torch.compile
with the backend's compiler), numerics (device output vs a CPU float64 reference), on_device (no
op fell back to the CPU during the run). A stage whose prerequisite did not pass is
`not_attempted` with the reason; what the backend cannot report is `not_attempted` too. A model
problem never raises out of `check_model`: every stage ends in a Status.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from contracts.backends import Backend, fallback_count, fallback_ops, get_backend
from contracts.errors import classify
from contracts.records import ModelCheck, ModelSpec, StageResult
from contracts.status import MODEL_STAGES, Status
from harness.inputs import make_inputs
from harness.models import architecture_of, build_model, parameter_count, resolve_config
from harness.numerics import compare_outputs, float_tensors
from harness.quiet import quiet_transformers
from harness.train_mode import buffers_snapshot, restore_buffers

#: stage -> the stages that must have passed before it can run
PREREQUISITES: dict[str, tuple[str, ...]] = {
    "load": (),
    "forward": ("load",),
    "backward": ("forward",),
    "compile": ("load",),
    "numerics": ("forward",),
    "on_device": ("forward",),
}


class StageFailed(Exception):
    """A stage ran to an answer and the answer was wrong (status fail, with a reason)."""

    def __init__(self, reason: str, metrics: dict[str, Any] | None = None):
        super().__init__(reason)
        self.reason = reason
        self.metrics = metrics or {}


class StageSkipped(Exception):
    def __init__(self, reason: str, status: Status = Status.SKIPPED):
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass
class _Run:
    spec: ModelSpec
    adapter: Backend
    seed: int
    result: ModelCheck
    config: Any = None
    cpu_model: Any = None
    model: Any = None
    inputs: Any = None
    cpu_kwargs: dict = field(default_factory=dict)
    kwargs: dict = field(default_factory=dict)
    output: Any = None
    fallback_events: list = field(default_factory=list)


def _to(x: Any, device: torch.device, dtype: torch.dtype | None = None) -> Any:
    if isinstance(x, torch.Tensor):
        x = x.to(device)
        return x.to(dtype) if dtype is not None and x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: _to(v, device, dtype) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device, dtype) for v in x)
    return x


def _detach_cpu(output: Any) -> list[torch.Tensor]:
    return [t.detach().to("cpu") for t in float_tensors(output)]


def _tracked(run: _Run, fn: Callable[[], Any]) -> Any:
    with run.adapter.track_fallbacks() as events:
        value = fn()
        run.adapter.synchronize()
    run.fallback_events.extend(events)
    return value


# --------------------------------------------------------------------------- stages
def _load(run: _Run) -> dict[str, Any]:
    arch = architecture_of(run.spec)
    run.result.architecture = arch
    with quiet_transformers():
        run.config = resolve_config(run.spec)
        run.cpu_model = build_model(run.config, arch, seed=run.seed)
        run.result.parameters = parameter_count(run.cpu_model)
        run.inputs = make_inputs(run.cpu_model, run.config, arch, seed=run.seed)
    run.cpu_kwargs = run.inputs.kwargs
    device = run.adapter.device
    run.model = _tracked(run, lambda: copy.deepcopy(run.cpu_model).to(device))
    run.kwargs = _to(run.cpu_kwargs, device)
    return {
        "shrink_level": getattr(run.config, "_shrink_level", ""),
        "shrink_budget_changes": getattr(run.config, "_shrink_budget_changes", []),
        "train_mode_changes": getattr(run.config, "_shrink_train_mode_changes", []),
        "input_names": sorted(run.cpu_kwargs),
        "labels": run.inputs.labels,
        "input_notes": run.inputs.notes,
        "input_sources": dict(sorted(run.inputs.sources.items())),
    }


def _forward(run: _Run) -> dict[str, Any]:
    torch.manual_seed(run.seed)
    with quiet_transformers():
        run.output = _tracked(run, lambda: run.model(**run.kwargs))
    tensors = float_tensors(run.output)
    if not tensors:
        raise StageFailed("the model returned no floating-point output")
    wrong = [str(t.device) for t in tensors if t.device.type != run.adapter.device_type]
    if wrong:
        raise StageFailed(f"outputs on {wrong[0]}, not on {run.adapter.device_type}")
    return {"outputs": len(tensors)}


def _loss(output: Any) -> tuple[torch.Tensor, str]:
    loss = getattr(output, "loss", None)
    if isinstance(output, dict) and loss is None:
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss.float().sum(), "labels"
    # masked logits are -inf by design (grounding models): the surrogate uses the finite entries
    parts = [t.float()[torch.isfinite(t)].pow(2).mean() for t in float_tensors(output)
             if t.requires_grad and bool(torch.isfinite(t).any())]
    if not parts:
        raise StageSkipped("no output depends on a trainable parameter")
    return torch.stack(parts).sum(), "surrogate"


def _backward(run: _Run) -> dict[str, Any]:
    """The forward again in train mode (dropout is 0: the same values as in eval mode), then
    backward; buffers a train-mode forward updates (BatchNorm running stats) are restored."""
    saved = buffers_snapshot(run.model)
    run.model.train()
    try:
        torch.manual_seed(run.seed)
        with quiet_transformers():
            output = _tracked(run, lambda: run.model(**run.kwargs))
        loss, source = _loss(output)
        _tracked(run, loss.backward)
    finally:
        run.model.eval()
        restore_buffers(run.model, saved)
    params = [p for p in run.model.parameters() if p.requires_grad]
    with_grad = [p for p in params if p.grad is not None]
    metrics = {"loss_source": source, "loss": float(loss.detach().to("cpu")), "mode": "train",
               "params_with_grad": len(with_grad), "trainable_params": len(params)}
    if not with_grad:
        raise StageFailed("no parameter received a gradient", metrics)
    off = [p.grad.device.type for p in with_grad if p.grad.device.type != run.adapter.device_type]
    if off:
        raise StageFailed(f"{len(off)} gradients on {off[0]}, not on the device", metrics)
    if not math.isfinite(metrics["loss"]):
        raise StageFailed("loss is not finite", metrics)
    return metrics


def _compile(run: _Run) -> dict[str, Any]:
    if run.adapter.compile_backend is None:
        raise StageSkipped(f"backend {run.adapter.name} has no torch.compile backend", Status.NOT_ATTEMPTED)
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(run.model, backend=run.adapter.compile_backend)
    torch.manual_seed(run.seed)
    with torch.no_grad(), quiet_transformers():
        out = _tracked(run, lambda: compiled(**run.kwargs))
    graphs = int(counters["stats"]["unique_graphs"])
    frames = int(counters["frames"]["ok"])
    breaks = int(sum(counters["graph_break"].values()))
    run.result.graphs = graphs
    run.result.recompiles = max(0, frames - graphs) if graphs else 0
    metrics = {"graphs": graphs, "graph_breaks": breaks, "frames": frames}
    if run.output is not None:
        cmp = compare_outputs(_detach_cpu(out), _detach_cpu(run.output))
        metrics["vs_eager"] = cmp.to_dict()
    torch._dynamo.reset()
    return metrics


def _numerics(run: _Run) -> dict[str, Any]:
    ref_model = copy.deepcopy(run.cpu_model).to(torch.float64)
    torch.manual_seed(run.seed)
    with torch.no_grad(), quiet_transformers():
        try:
            reference = ref_model(**_to(run.cpu_kwargs, torch.device("cpu"), torch.float64))
            ref_kind = "cpu_float64"
        except Exception:  # noqa: BLE001 - a model that cannot run in float64: float32 reference
            reference, ref_kind = None, "cpu_float32"
        torch.manual_seed(run.seed)
        eager = run.cpu_model(**run.cpu_kwargs)
    if reference is None:
        reference = eager
    cmp = compare_outputs(_detach_cpu(run.output), _detach_cpu(reference), _detach_cpu(eager))
    metrics = {"reference": ref_kind, **cmp.to_dict()}
    if not cmp.passed:
        raise StageFailed(cmp.reason or f"mismatch ({cmp.method})", metrics)
    return metrics


def _on_device(run: _Run) -> dict[str, Any]:
    if not run.adapter.reports_fallbacks:
        raise StageSkipped(f"backend {run.adapter.name} cannot report CPU fallbacks", Status.NOT_ATTEMPTED)
    ops = run.result.fallback_ops
    metrics = {"fallback_count": run.result.fallback_count, "fallback_ops": ops}
    if run.result.fallback_count:
        raise StageFailed(f"{run.result.fallback_count} CPU fallbacks: {', '.join(ops[:5])}", metrics)
    return metrics


STAGE_FUNCTIONS: dict[str, Callable[[_Run], dict[str, Any]]] = {
    "load": _load, "forward": _forward, "backward": _backward,
    "compile": _compile, "numerics": _numerics, "on_device": _on_device,
}


# --------------------------------------------------------------------------- driver
def _wanted(stages: Sequence[str] | None) -> list[str]:
    if stages is None:
        return list(MODEL_STAGES)
    unknown = [s for s in stages if s not in MODEL_STAGES]
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}: choose from {', '.join(MODEL_STAGES)}")
    need = set(stages)
    for s in list(stages):
        stack = list(PREREQUISITES[s])
        while stack:
            p = stack.pop()
            if p not in need:
                need.add(p)
                stack.extend(PREREQUISITES[p])
    return [s for s in MODEL_STAGES if s in need]


def _summarize_fallbacks(run: _Run) -> None:
    r = run.result
    r.fallback_events = run.fallback_events
    r.fallback_count = fallback_count(run.fallback_events)
    r.fallback_ops = fallback_ops(run.fallback_events)


def _run_stage(run: _Run, name: str) -> StageResult:
    t0 = time.perf_counter()
    try:
        metrics = STAGE_FUNCTIONS[name](run)
        return StageResult(name, Status.PASS, seconds=time.perf_counter() - t0, metrics=metrics)
    except StageFailed as f:
        return StageResult(name, Status.FAIL, reason=f.reason, seconds=time.perf_counter() - t0, metrics=f.metrics)
    except StageSkipped as s:
        return StageResult(name, s.status, reason=s.reason, seconds=time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - every model problem becomes an outcome
        info = classify(exc)
        return StageResult(name, info.status, reason=f"{info.error_class}: {info.message}"[:300],
                           error_class=info.error_class, message=info.message, failing_op=info.failing_op,
                           seconds=time.perf_counter() - t0)


def check_model(spec: ModelSpec, backend: str = "neuron", stages: Sequence[str] | None = None,
                seed: int = 0, judge: Callable[[_Run, list[str]], None] | None = None) -> ModelCheck:
    """Run the stages of one model on one backend. Never raises for a model problem.

    `judge(run, stages)` runs after the stages with the run's objects (the blame of each stage
    that did not pass: harness.blame_probe.judge_run, what `check_with_blame` passes)."""
    wanted = _wanted(stages)
    result = ModelCheck(model_id=spec.model_id, backend=backend, model_type=spec.model_type,
                        architecture=spec.architecture)
    try:
        adapter = get_backend(backend)
        if not adapter.is_available():
            raise RuntimeError(f"backend {backend!r} is not available on this machine")
    except Exception as exc:  # noqa: BLE001
        info = classify(exc)
        for i, name in enumerate(wanted):
            result.stages[name] = (StageResult(name, Status.ERROR, reason=f"backend: {info.message}"[:300],
                                               error_class=info.error_class, message=info.message) if i == 0
                                   else StageResult(name, Status.NOT_ATTEMPTED, reason="backend unavailable"))
        return result
    run = _Run(spec=spec, adapter=adapter, seed=seed, result=result)
    adapter.reset_peak_memory()
    for name in wanted:
        if name == "on_device":
            _summarize_fallbacks(run)
        blocked = [p for p in PREREQUISITES[name] if p in result.stages and result.stages[p].status != Status.PASS]
        if blocked:
            p = blocked[0]
            result.stages[name] = StageResult(name, Status.NOT_ATTEMPTED, reason=f"{p} {result.stages[p].status.value}")
            continue
        result.stages[name] = _run_stage(run, name)
    _summarize_fallbacks(run)
    result.peak_memory_bytes = adapter.peak_memory()
    if judge is not None:
        _judge(judge, run, wanted)
    return result


def _judge(judge: Callable[[_Run, list[str]], None], run: _Run, wanted: list[str]) -> None:
    """A judge that raises must not lose the check: its stages stay unjudged, with the reason."""
    try:
        judge(run, wanted)
    except Exception as exc:  # noqa: BLE001
        info = classify(exc)
        for r in run.result.stages.values():
            if r.status != Status.PASS and not r.blame:
                r.blame, r.blame_evidence = "harness", {"rule": "judge_error",
                                                         "why": f"{info.error_class}: {info.message}"[:300]}
