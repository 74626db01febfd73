"""The `compile` stage: the training step compiled with the backend's compiler, checked against eager.

The model is compiled with `torch.compile(backend=<the adapter's compile_backend>)` and the step
(forward with grad, the loss, backward through the compiled backward graphs) runs twice, as a
training loop would: the second call must hit the compiled code. Its loss, outputs and parameter
gradients are compared with the eager step on the same device (the `forward` and `backward`
stages) through harness.stages.compare.compare_with_eager, which is dynamo's `same(eager, compiled,
fp64_ref)`; a mismatch fails the stage naming the worst tensor. Forward and backward graphs,
graph breaks and recompiles are recorded (Dynamo's compile-start callbacks: one per frame compile,
`LAZY_BACKWARD` per backward graph compile).

A forward that failed on the device for a reason it fails with on the CPU reference too was the
harness's (or upstream's) failure; compiling it would only repeat it: the stage is then
`not_attempted` with that reason. A compile that passes where eager failed on the device stays a
useful fact, so otherwise the compile runs.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from agents.quiet import quiet_transformers
from contracts.backends import to_cpu
from contracts.errors import classify
from contracts.status import FAILING, Status
from harness.errors import NoLoss, StageFailed, StageSkipped
from harness.stages.compare import compare_with_eager, worst
from harness.stages.numerics import cpu_named, device_named, reference_of, undeclared_rounding
from harness.stages.run import StageRun, on_device, tracked
from harness.stages.step import parameter_grads, restore_grads, stash_grads, train_mode, training_loss

#: compiled steps run: the first compiles, the second must reuse it (a recompile is recorded)
STEPS = 2


# ---------------------------------------------------------------------- whose forward failure


def reference_forward_failure(run: StageRun) -> str:
    """Why the model's forward fails on the CPU reference too ("" when it runs there), once per run.

    The one question of blame (harness.blame.probe) the compile stage needs before it
    runs; blame's reference re-run may fill `run.reference_forward` first, and this re-run is then
    skipped."""
    if run.reference_forward is None:
        try:
            torch.manual_seed(run.seed)
            with torch.no_grad(), quiet_transformers():
                copy.deepcopy(run.cpu_model)(**run.cpu_kwargs)
            run.reference_forward = ""
        except Exception as exc:  # noqa: BLE001 - the answer is the failure
            info = classify(exc)
            run.reference_forward = f"{info.error_class}: {info.message}"[:300]
    return run.reference_forward


def _not_after_a_harness_forward_failure(run: StageRun) -> None:
    forward = run.result.stages.get("forward")
    if forward is None or forward.status not in FAILING:
        return
    why = reference_forward_failure(run)
    if why:
        raise StageSkipped(
            f"forward {forward.status.value} on the cpu reference too: {why}", Status.NOT_ATTEMPTED
        )


# ---------------------------------------------------------------------- counting compiles


@dataclass
class CompileLog:
    """Compiles seen through Dynamo's start callbacks: (trigger, frame id, compile count of the frame)."""

    starts: list[tuple[str, str, int]] = field(default_factory=list)

    def __call__(self, args: Any) -> None:
        text = str(args.compile_id).lstrip("!")
        frame, _, rest = text.partition("/")
        try:
            n = int(rest.split("_")[0])
        except ValueError:
            n = 0
        self.starts.append((args.callback_trigger.name, frame, n))

    def mark(self) -> int:
        return len(self.starts)

    def summary(self, since: int = 0, until: int | None = None) -> dict[str, int]:
        seen = self.starts[since:until]
        forward = [s for s in seen if s[0] == "DYNAMO"]
        backward = [s for s in seen if s[0] == "LAZY_BACKWARD"]
        return {
            "forward_compiles": len(forward),
            "backward_graphs": len(backward),
            "forward_recompiles": sum(1 for s in forward if s[2] > 0),
            "backward_recompiles": sum(1 for s in backward if s[2] > 0),
            "frames": len({s[1] for s in forward}),
        }


@contextlib.contextmanager
def _compile_log() -> Iterator[CompileLog]:
    from torch._dynamo.callback import callback_handler

    log = CompileLog()
    callback_handler.register_start_callback(log)
    try:
        yield log
    finally:
        with contextlib.suppress(ValueError):
            callback_handler.remove_start_callback(log)


# ---------------------------------------------------------------------- start-up


def warm_up() -> None:
    """Import torch.compile's own stack (Dynamo, AOTAutograd, functorch's partitioners, sympy,
    networkx: ~1,300 modules) without compiling anything.

    The first compile in a process imports them (13-15 s of the first model's compile stage at
    load 12, docs/runner.md); a tier that compiles imports them in its workers' start-up instead,
    which overlaps the listing of the cases. Imports only: no Dynamo state is created."""
    import torch._dynamo
    import torch._functorch.aot_autograd
    import torch._functorch.partitioners
    import torch._inductor.codecache  # noqa: F401  (torch.compile imports it for every backend)


# ---------------------------------------------------------------------- the compiled step


@dataclass
class StepResult:
    outputs: dict[str, torch.Tensor]
    loss: torch.Tensor | None
    grads: dict[str, torch.Tensor]


def _step(run: StageRun, compiled: Any, track: bool, train: bool) -> StepResult:
    """One compiled training step; its gradients are taken out of the model afterwards."""

    def go() -> StepResult:
        with train_mode(run.model) if train else contextlib.nullcontext():
            torch.manual_seed(run.seed)
            with quiet_transformers():
                out = compiled(**run.kwargs)
            try:
                loss, _ = training_loss(out)
            except NoLoss:
                return StepResult(cpu_named(out), None, {})
            loss.backward()
        grads = {n: g.detach().to("cpu") for n, g in parameter_grads(run.model).items()}
        stash_grads(run.model)
        return StepResult(cpu_named(out), loss.detach().to("cpu"), grads)

    if not track:  # the repeat: its fallbacks are the first step's again, not new events
        with on_device(run):
            result = go()
            run.adapter.synchronize()
        return result
    return tracked(run, go)


def _eager(run: StageRun, saved_grads: dict[str, Any]) -> tuple[StepResult | None, str, bool]:
    """The eager device step to compare with, what of it is missing, and whether it ran in train
    mode (the compiled step runs in the same mode)."""
    backward = run.result.stages.get("backward")
    if backward is not None and backward.status == Status.PASS and run.train_output is not None:
        grads = to_cpu(run.adapter, {n: g for n, g in saved_grads.items() if g is not None})
        return (
            StepResult(device_named(run, run.train_output), to_cpu(run.adapter, run.loss), grads),
            "",
            True,
        )
    if run.output is None:
        forward = run.result.stages.get("forward")
        return (
            None,
            f"no eager forward to compare with (forward {forward.status.value if forward else 'not run'})",
            True,
        )
    note = f"outputs only: eager backward {backward.status.value if backward else 'not run'}"
    return StepResult(device_named(run, run.output), None, {}), note, False


def none_as_zero(
    compiled: dict[str, torch.Tensor], eager: dict[str, torch.Tensor]
) -> tuple[dict, dict, list[str]]:
    """The gradients of both steps with a missing one filled in as zeros where the other step's is
    all zeros, and the names filled in.

    A parameter whose output the loss does not use (a vision tower's last layer when the model
    reads an earlier layer's features; an unused pooler) gets no gradient in eager, and a zero one
    from AOTAutograd, which materializes the tangents of unused graph outputs as zeros: that is
    torch.compile's own behaviour on every backend, not a difference of the device. PyTorch's
    accuracy check does the same (torch._dynamo.testing.collect_results: "Treat None and zero
    grad as same"). A gradient present on one side with any non-zero value still fails."""
    compiled, eager, filled = dict(compiled), dict(eager), []
    for have, lack in ((compiled, eager), (eager, compiled)):
        for n in [n for n in have if n not in lack]:
            if not bool(have[n].count_nonzero()):
                lack[n] = torch.zeros_like(have[n])
                filled.append(n)
    return compiled, eager, sorted(filled)


def _versus_eager(
    run: StageRun, steps: list[StepResult], eager: StepResult, train: bool
) -> tuple[Any, list[str]]:
    """The worst comparison of every step with eager, and the gradients taken as zero for None."""
    loose = undeclared_rounding(run)
    arch = run.result.architecture
    ref = {}

    def truth(part: str) -> dict[str, torch.Tensor]:
        if part not in ref:
            r = reference_of(run).truth
            ref["outputs"] = cpu_named(r.train_output if train else r.output)
            ref["loss"] = {"loss": r.loss} if r.loss is not None else {}
            ref["grads"] = dict(r.grads)
        return ref[part]

    results, zero_for_none = [], set()
    for i, step in enumerate(steps, 1):
        parts = [("outputs", step.outputs, eager.outputs)]
        if eager.loss is not None and step.loss is not None:
            parts.append(("loss", {"loss": step.loss}, {"loss": eager.loss}))
        if eager.grads:
            compiled_grads, eager_grads, filled = none_as_zero(step.grads, eager.grads)
            zero_for_none.update(filled)
            parts.append(("grads", compiled_grads, eager_grads))
        for part, actual, expected in parts:
            c = compare_with_eager(
                actual, expected, lambda p=part: truth(p), undeclared_rounding=loose, architecture=arch
            )
            label = {"outputs": "output", "loss": "", "grads": "gradient of"}[part]
            c.name = f"step {i} {label} {c.name}".replace("  ", " ")
            c.reason = f"step {i} {label} {c.reason}".replace("  ", " ") if c.reason else ""
            results.append(c)
    return worst(results), sorted(zero_for_none)


def worst_compared(metrics: dict[str, Any] | None) -> tuple[str, Any, Any, Any]:
    """What a compile comparison's `vs_eager` names as its worst tensor, without its step
    ("gradient of p": either step may be the worst for the same tensor), how it was judged
    (allclose, rmse, nonfinite, shape), its RMSE and the RMSE allowed."""
    found = (metrics or {}).get("vs_eager") or {}
    name = re.sub(r"^step \d+ ", "", str(found.get("name") or "")).strip()
    return name, found.get("method"), found.get("rmse"), found.get("allowed_rmse")


def compile_stage(run: StageRun) -> dict[str, Any]:
    if run.adapter.compile_backend is None:
        raise StageSkipped(f"backend {run.adapter.name} has no torch.compile backend", Status.NOT_ATTEMPTED)
    _not_after_a_harness_forward_failure(run)
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    saved = stash_grads(run.model)
    eager, note, train = _eager(run, saved)
    steps: list[StepResult] = []
    try:
        with _compile_log() as log:
            compiled = torch.compile(run.model, backend=run.adapter.compile_backend)
            steps.append(_step(run, compiled, track=True, train=train))
            forward_graphs, first_step = int(counters["stats"]["unique_graphs"]), log.mark()
            for _ in range(STEPS - 1):
                steps.append(_step(run, compiled, track=False, train=train))
            reasons = Counter({str(k): int(v) for k, v in counters["graph_break"].items()})
    finally:
        restore_grads(run.model, saved)
        torch._dynamo.reset()
    first, everything = log.summary(0, first_step), log.summary(0)
    metrics: dict[str, Any] = {
        "forward_graphs": forward_graphs,
        "backward_graphs": first["backward_graphs"],
        "graph_breaks": max(0, forward_graphs - 1),
        "frames": first["frames"],
        "graph_break_reasons": [r for r, _ in reasons.most_common(3)],
        "forward_recompiles": everything["forward_recompiles"],
        "backward_recompiles": everything["backward_recompiles"],
        "repeat_compiles": len(log.starts) - first_step,
        "steps": STEPS,
    }
    run.result.graphs = metrics["forward_graphs"] + metrics["backward_graphs"]
    run.result.recompiles = metrics["forward_recompiles"] + metrics["backward_recompiles"]
    metrics["mode"] = "train" if train else "eval"
    if eager is None:
        metrics["vs_eager"] = {"compared": False, "reason": note}
        return metrics
    cmp, zero_for_none = _versus_eager(run, steps, eager, train)
    metrics["vs_eager"] = {**cmp.to_dict(), **({"note": note} if note else {})}
    if zero_for_none:  # said, not hidden: which gradients were None on one side and zero on the other
        metrics["vs_eager"]["grads_none_as_zero"] = {"count": len(zero_for_none), "first": zero_for_none[:5]}
    if not cmp.passed:
        raise StageFailed(f"compiled step differs from eager: {cmp.reason or cmp.method}", metrics)
    return metrics
