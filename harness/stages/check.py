"""Check one model on one backend, stage by stage.

    >>> from harness.stages.check import check_model
    >>> from contracts.records import ModelSpec
    >>> result = check_model(ModelSpec("catalog/bert", "bert", "BertForMaskedLM"), backend="neuron")
    >>> result.stages["forward"].status
    <Status.PASS: 'pass'>

Stages run in MODEL_STAGES order: load (shrink, build with seeded random weights, move to the
device), forward, backward (loss.backward with gradients on the device), compile (the training
step compiled with the backend's compiler, checked against eager: harness.stages.compile),
numerics (outputs and parameter gradients vs the CPU float64 reference: harness.stages.numerics),
on_device (no op fell back to the CPU during the run). A stage whose prerequisite did not pass is
`not_attempted` with the reason; what the backend cannot report is `not_attempted` too. A model
problem never raises out of `check_model`: every stage ends in a Status.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from agents.quiet import quiet_transformers
from contracts.backends import fallback_count, fallback_ops, get_backend
from contracts.errors import classify
from contracts.records import ModelCheck, ModelSpec, StageResult
from contracts.status import MODEL_STAGES, Status
from harness.build.inputs import make_inputs
from harness.build.models import architecture_of, build_model, parameter_count, resolve_config
from harness.errors import NoLoss, StageFailed, StageSkipped
from harness.stages.compare import float_tensors, named_tensors
from harness.stages.compile import compile_stage
from harness.stages.numerics import numerics_stage
from harness.stages.run import StageRun, fresh, on_device, to_device, tracked
from harness.stages.step import train_mode, training_loss
from harness.stages.torch_state import restored_torch_state

#: stage -> the stages that must have passed before it can run
PREREQUISITES: dict[str, tuple[str, ...]] = {
    "load": (),
    "forward": ("load",),
    "backward": ("forward",),
    "compile": ("load",),
    "numerics": ("forward",),
    "on_device": ("forward",),
}
#: stage -> the stages it compares with: run before it when it is asked for, but not required to
#: pass (the compiled step is checked against the eager forward and backward; without them it
#: would pass uncompared, and `--stages compile` could never catch a compile-only bug)
COMPARED_WITH: dict[str, tuple[str, ...]] = {
    "compile": ("forward", "backward"),
}


_Run = StageRun  # the name harness.blame.probe imports
_to = to_device
_tracked = tracked


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
    copied = copy.deepcopy(run.cpu_model)  # CPU work: outside the device scope
    run.model = _tracked(run, lambda: copied.to(device))
    run.kwargs = _tracked(run, lambda: _to(run.cpu_kwargs, device))
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
    with on_device(run):
        return _forward_on_device(run)


def _forward_on_device(run: _Run) -> dict[str, Any]:
    torch.manual_seed(run.seed)
    with quiet_transformers():
        run.output = _tracked(run, lambda: run.model(**fresh(run.kwargs)))
    tensors = float_tensors(run.output)
    # a tokenizer encoder's output is integer codes only (WavTokenizer's encoder): a result, with
    # nothing to differentiate (backward is then not applicable)
    codes = [] if tensors else [t for _, t in named_tensors(run.output)]
    if not tensors and not codes:
        raise StageFailed("the model returned no tensor output")
    wrong = [str(t.device) for t in tensors + codes if t.device.type != run.adapter.device_type]
    if wrong:
        raise StageFailed(f"outputs on {wrong[0]}, not on {run.adapter.device_type}")
    return {"outputs": len(tensors)} if tensors else {"outputs": 0, "integer_outputs": len(codes)}


def _backward(run: _Run) -> dict[str, Any]:
    """The forward again in train mode (dropout is 0: the same values as in eval mode), then
    backward; buffers a train-mode forward updates (BatchNorm running stats) are restored. A
    forward that runs under `torch.inference_mode` (video trackers) has no backward: its eval
    outputs are inference tensors, and its train-mode path is not meant to run. All of it is the
    device's work (the device scope)."""
    with on_device(run):
        return _backward_on_device(run)


def _backward_on_device(run: _Run) -> dict[str, Any]:
    outputs = float_tensors(run.output) if run.output is not None else []
    if outputs and all(t.is_inference() for t in outputs):
        raise StageSkipped("the forward runs under torch.inference_mode: there is no backward")
    if run.output is not None and not outputs:
        raise StageSkipped(
            "the model returns integer outputs only (codes): there is nothing to differentiate"
        )
    with train_mode(run.model):
        torch.manual_seed(run.seed)
        with quiet_transformers():
            output = _tracked(run, lambda: run.model(**fresh(run.kwargs)))
        try:
            loss, source = training_loss(output)
        except NoLoss as exc:
            raise StageSkipped(str(exc)) from None
        _tracked(run, loss.backward)
    run.train_output, run.loss = output, loss.detach()
    params = [p for p in run.model.parameters() if p.requires_grad]
    with_grad = [p for p in params if p.grad is not None]
    metrics = {
        "loss_source": source,
        "loss": float(loss.detach().to("cpu")),
        "mode": "train",
        "params_with_grad": len(with_grad),
        "trainable_params": len(params),
    }
    if not with_grad:
        raise StageFailed("no parameter received a gradient", metrics)
    off = [p.grad.device.type for p in with_grad if p.grad.device.type != run.adapter.device_type]
    if off:
        raise StageFailed(f"{len(off)} gradients on {off[0]}, not on the device", metrics)
    if not math.isfinite(metrics["loss"]):
        raise StageFailed("loss is not finite", metrics)
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
    "load": _load,
    "forward": _forward,
    "backward": _backward,
    "compile": compile_stage,
    "numerics": numerics_stage,
    "on_device": _on_device,
}


# --------------------------------------------------------------------------- driver
def _wanted(stages: Sequence[str] | None) -> list[str]:
    if stages is None:
        return list(MODEL_STAGES)
    unknown = [s for s in stages if s not in MODEL_STAGES]
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}: choose from {', '.join(MODEL_STAGES)}")
    need = set(stages)
    for s in [*stages, *(c for wanted in stages for c in COMPARED_WITH.get(wanted, ()))]:
        need.add(s)
        stack = list(PREREQUISITES[s])
        while stack:
            p = stack.pop()
            if p not in need:
                need.add(p)
                stack.extend(PREREQUISITES[p])
    return [s for s in MODEL_STAGES if s in need]


def _summarize_fallbacks(run: _Run) -> None:
    """The run's fallback figures; null when the backend cannot report them (never a false 0)."""
    r = run.result
    r.fallback_events = run.fallback_events
    reported = run.adapter.reports_fallbacks
    r.fallback_count = fallback_count(run.fallback_events) if reported else None
    r.fallback_ops = fallback_ops(run.fallback_events) if reported else None


def _run_stage(run: _Run, name: str) -> StageResult:
    """One stage, never raising; PyTorch's modes it leaves behind are put back and named in its
    metrics (`torch_state_restored`)."""
    with restored_torch_state() as leaked:
        result = _stage_outcome(run, name)
    if leaked:
        result.metrics = {**(result.metrics or {}), "torch_state_restored": leaked}
    return result


def _stage_outcome(run: _Run, name: str) -> StageResult:
    t0 = time.perf_counter()
    try:
        metrics = STAGE_FUNCTIONS[name](run)
        return StageResult(name, Status.PASS, seconds=time.perf_counter() - t0, metrics=metrics)
    except StageFailed as f:
        return StageResult(
            name, Status.FAIL, reason=f.reason, seconds=time.perf_counter() - t0, metrics=f.metrics
        )
    except StageSkipped as s:
        return StageResult(name, s.status, reason=s.reason, seconds=time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - every model problem becomes an outcome
        info = classify(exc)
        return StageResult(
            name,
            info.status,
            reason=f"{info.error_class}: {info.message}"[:300],
            error_class=info.error_class,
            message=info.message,
            failing_op=info.failing_op,
            seconds=time.perf_counter() - t0,
        )


def check_model(
    spec: ModelSpec,
    backend: str = "neuron",
    stages: Sequence[str] | None = None,
    seed: int = 0,
    judge: Callable[[_Run, list[str]], None] | None = None,
) -> ModelCheck:
    """Run the stages of one model on one backend. Never raises for a model problem.

    `judge(run, stages)` runs after the stages with the run's objects (the blame of each stage
    that did not pass: harness.blame.probe.judge_run, what `check_with_blame` passes)."""
    wanted = _wanted(stages)
    result = ModelCheck(
        model_id=spec.model_id, backend=backend, model_type=spec.model_type, architecture=spec.architecture
    )
    try:
        adapter = get_backend(backend)
        if not adapter.is_available():
            raise RuntimeError(f"backend {backend!r} is not available on this machine")
    except Exception as exc:  # noqa: BLE001
        info = classify(exc)
        for i, name in enumerate(wanted):
            result.stages[name] = (
                StageResult(
                    name,
                    Status.ERROR,
                    reason=f"backend: {info.message}"[:300],
                    error_class=info.error_class,
                    message=info.message,
                )
                if i == 0
                else StageResult(name, Status.NOT_ATTEMPTED, reason="backend unavailable")
            )
        return result
    run = _Run(spec=spec, adapter=adapter, seed=seed, result=result)
    adapter.reset_peak_memory()
    for name in wanted:
        if name == "on_device":
            _summarize_fallbacks(run)
        blocked = [
            p for p in PREREQUISITES[name] if p in result.stages and result.stages[p].status != Status.PASS
        ]
        if blocked:
            p = blocked[0]
            result.stages[name] = StageResult(
                name, Status.NOT_ATTEMPTED, reason=f"{p} {result.stages[p].status.value}"
            )
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
                r.blame, r.blame_evidence = (
                    "harness",
                    {"rule": "judge_error", "why": f"{info.error_class}: {info.message}"[:300]},
                )
