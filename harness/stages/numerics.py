"""The `numerics` stage: the device's outputs and parameter gradients against the CPU reference.

The eager device's training step (the `forward` output, the `backward` gradients) is compared
with the float64 CPU reference of the same step, rounded as the device declares it rounds
(harness.stages.reference), through the gate of harness.stages.compare: allclose with the fp32 class,
else the fp64-RMSE gate against the CPU float32 run. The worst output and the worst parameter
gradient are reported by name; either failing fails the stage.
"""

from __future__ import annotations

from typing import Any

from contracts.backends import to_cpu
from contracts.status import Status
from harness.errors import StageFailed, StageSkipped
from harness.stages.compare import TensorComparison, compare_named, compare_outputs, named_float_tensors
from harness.stages.reference import StepReference, compute_reference, dispatch_key
from harness.stages.run import StageRun, on_device
from harness.stages.step import parameter_grads, training_loss


def rounded_inputs(run: StageRun) -> dict[str, tuple[str, ...]]:
    """The backend's declared input rounding (empty: it computes as the dtypes say)."""
    return dict(run.adapter.rounded_inputs() or {})


def undeclared_rounding(run: StageRun) -> bool:
    """A reduced-precision mode whose rounding the reference cannot follow (weaker tolerances)."""
    return run.adapter.precision_mode() != "exact" and not rounded_inputs(run)


def reference_of(run: StageRun) -> StepReference:
    """The run's CPU reference of the training step, computed once (numerics and compile share it)."""
    if run.reference is None:
        try:
            run.reference = compute_reference(
                run.cpu_model,
                run.cpu_kwargs,
                run.seed,
                training_loss,
                rounded_inputs(run),
                dispatch_key(run.adapter.device_type),
            )
        except Exception as exc:
            raise StageSkipped(
                f"cpu reference raised: {type(exc).__name__}: {exc}"[:300], Status.ERROR
            ) from exc
    return run.reference


def cpu_named(output: Any) -> dict[str, Any]:
    """The floating tensors of a CPU output by name (the reference's: outside the device scope)."""
    return {n: t.detach().to("cpu") for n, t in named_float_tensors(output)}


def device_named(run: StageRun, output: Any) -> dict[str, Any]:
    """The floating tensors of a device output by name, brought to the CPU in the device scope."""
    with on_device(run):
        return cpu_named(output)


def _backward_passed(run: StageRun) -> str:
    """ "" when the device's gradients are there to check, else why not."""
    stage = run.result.stages.get("backward")
    if stage is None:
        return "backward was not run"
    if stage.status != Status.PASS:
        return f"backward {stage.status.value}"
    return ""


def check_gradients(run: StageRun, ref: StepReference) -> tuple[TensorComparison | None, str]:
    """The device's parameter gradients against the reference's (None, why: not checked)."""
    why = _backward_passed(run) or (
        f"the reference's backward failed: {ref.truth.error}" if ref.truth.error else ""
    )
    if why:
        return None, why
    device = to_cpu(run.adapter, parameter_grads(run.model))
    return compare_named(
        device,
        ref.truth.grads,
        ref.eager.grads,
        undeclared_rounding=undeclared_rounding(run),
        architecture=run.result.architecture,
    ), ""


def numerics_stage(run: StageRun) -> dict[str, Any]:
    ref = reference_of(run)
    loose = undeclared_rounding(run)
    outputs = compare_outputs(
        device_named(run, run.output),
        ref.truth.output,
        ref.eager.output,
        undeclared_rounding=loose,
        architecture=run.result.architecture,
    )
    metrics: dict[str, Any] = {"reference": ref.kind, "rounding": ref.rounding, **outputs.to_dict()}
    grads, why_not = check_gradients(run, ref)
    metrics["gradients"] = grads.to_dict() if grads is not None else {"checked": False, "reason": why_not}
    if not outputs.passed:
        raise StageFailed(f"output {outputs.reason or outputs.method}", metrics)
    if grads is not None and not grads.passed:
        raise StageFailed(f"gradient of {grads.reason or grads.method}", metrics)
    return metrics
