"""Which call broke a backend-blamed row: the routes in order, bounded, never failing the row.

    check_with_root_cause(spec, "neuron")        # check_model + blame + localization (what tiers run)
    localize_run(run, wanted)                    # the judge hook's second half

For every stage of `LOCALIZED` that failed and is blamed `backend`, the failing step runs again on
the device under the shadow (harness.rootcause.shadow): `forward` its eval forward, `backward`
its training step, `numerics` both (outputs, then gradients); a step that raised where the shadow
saw no call raise is named from its exception and the calls seen above the dispatcher
(harness.rootcause.unseen: routes `exception`, `function_shadow`); `compile` the compiled training
step, shadowing the calls the backend runs op by op (`compiled_shadow`), then, where no call was
found, the captured AOT graphs minimized by PyTorch's accuracy minifier (`accuracy_minifier`,
harness.rootcause.minify). What was found is reduced to a registry entry and a standalone test,
which is verified (harness.rootcause.repro). Steps are shared between stages of a row (a
forward and a numerics failure of one fault are one shadowed forward).

Bounded by `HARNESS_ROOT_CAUSE_SECONDS` per row; a row that hits it says so (`gave_up`). Nothing
here changes a row's status or blame; an exception inside becomes `found=False` with its reason.
Crash and hang rows are localized by the runner from the worker's call journal, not here.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Any

from contracts.records import ModelCheck, ModelSpec
from contracts.rootcause import RootCause
from contracts.settings import current
from contracts.status import Blame, Status
from harness.rootcause.shadow import Finding, ShadowMode, for_run
from harness.stages.run import StageRun
from harness.stages.torch_state import restored_torch_state

#: stages localized here, and the statuses (crash and timeout rows are the runner's)
LOCALIZED = ("forward", "backward", "compile", "numerics")
STATUSES = (Status.FAIL, Status.ERROR)
#: the steps each stage's failure is looked for in, in order
STEPS: dict[str, tuple[str, ...]] = {
    "forward": ("eval_forward",),
    "backward": ("train_step",),
    "numerics": ("eval_forward", "train_step"),
    "compile": ("compiled_step", "minifier"),
}


def check_with_root_cause(
    spec: ModelSpec,
    backend: str = "neuron",
    stages: list[str] | None = None,
    seed: int = 0,
    seconds: float | None = None,
    force: bool = False,
) -> ModelCheck:
    """check_model with every failing stage blamed (harness.blame.probe) and every backend-blamed
    one localized (unless HARNESS_ROOT_CAUSE is off and not `force`), `seconds` per row."""
    from harness.stages.check import check_model

    return check_model(
        spec, backend, stages, seed, judge=partial(judge_and_localize, seconds=seconds, force=force)
    )


def judge_and_localize(
    run: StageRun, wanted: list[str], seconds: float | None = None, force: bool = False
) -> None:
    from harness.blame.probe import judge_run

    judge_run(run, wanted)
    if force or current().root_cause:
        localize_run(run, wanted, seconds)


def wants_root_cause(stage: str, status: Status, blame: str) -> bool:
    return stage in LOCALIZED and status in STATUSES and blame == Blame.BACKEND.value


def localize_run(run: StageRun, wanted: list[str], seconds: float | None = None) -> None:
    """Give every backend-blamed failing stage of `LOCALIZED` its root cause (StageResult.root_cause)."""
    budget = current().root_cause_seconds if seconds is None else seconds
    shared: dict[str, Any] = {}
    for name in LOCALIZED:
        row = run.result.stages.get(name)
        if name not in wanted or row is None or not wants_root_cause(name, row.status, row.blame):
            continue
        row.root_cause = localize_stage(run, name, budget, shared).to_dict()


def localize_stage(
    run: StageRun, stage: str, seconds: float, shared: dict[str, Any] | None = None
) -> RootCause:
    """The root cause of one stage (never raises): found, or not found with why."""
    t0 = time.monotonic()
    shared = {} if shared is None else shared
    try:
        with restored_torch_state():
            rc = _localize(run, stage, t0 + seconds, shared)
    except Exception as exc:  # noqa: BLE001 - localization never fails a row
        rc = RootCause.not_found(f"localization raised {type(exc).__name__}: {str(exc)[:200]}")
    return replace(rc, seconds=round(time.monotonic() - t0, 3))


def _localize(run: StageRun, stage: str, deadline: float, shared: dict[str, Any]) -> RootCause:
    if run.model is None:
        return RootCause.not_found("the model was not built on the device: nothing to re-run")
    searched: list[str] = []
    erred: list[tuple[str, ShadowMode]] = []
    gave_up = ""
    for step in STEPS[stage]:
        if step == "minifier":
            from harness.rootcause import minify

            if time.monotonic() > deadline:
                gave_up = gave_up or "time limit reached before the accuracy minifier"
                break
            if step not in shared:
                shared[step] = minify.localize_compiled(run, _train(run), deadline)
            rc, finding = shared[step]
            if finding is not None:
                return _reduced(rc, finding, run, deadline, shared)
            return replace(rc, why=_why_not(searched, rc.why))
        if step not in shared:
            mode = for_run(run, deadline, only_compiled=step == "compiled_step")
            shared[step] = (mode, _run_step(run, step, mode))
        mode, error = shared[step]
        searched.append(f"{step} ({mode.judged} calls judged)")
        if mode.found is not None:
            return _reduced(mode.found.record(_route(step), mode), mode.found, run, deadline, shared)
        if mode.gave_up:
            gave_up = mode.gave_up
            break
        if error:
            searched[-1] += f", ended by {error}"
            erred.append((step, mode))
    if not gave_up:
        from harness.rootcause import unseen

        for step, mode in erred:  # the failing call was not one the shadow saw
            rc = unseen.root_cause(run, step, mode, searched)
            if rc is not None:
                return rc
    return RootCause.not_found(_why_not(searched, ""), gave_up=gave_up, searched=searched)


def _reduced(
    rc: RootCause, finding: Finding, run: StageRun, deadline: float, shared: dict[str, Any]
) -> RootCause:
    """The record with its repro (made once per finding of a row)."""
    from contracts.rootcause import Repro
    from harness.rootcause.repro import reduce
    from harness.rootcause.verifier import verifier

    key = ("repro", id(finding))
    if key not in shared:
        verifier().start()  # its start-up (torch, the device) overlaps the reduction
        try:
            shared[key] = reduce(finding, run, deadline)
        except Exception as exc:  # noqa: BLE001 - the root cause stands without its repro
            shared[key] = Repro(
                verified=False, why=f"the repro could not be made: {type(exc).__name__}: {exc}"[:300]
            )
    return replace(rc, repro=shared[key])


def _why_not(searched: list[str], extra: str) -> str:
    head = "no call differs from the reference on the same inputs"
    parts = [head + (f" ({'; '.join(searched)})" if searched else "")]
    if extra:
        parts.append(extra)
    return "; ".join(parts)


def _route(step: str) -> str:
    return "compiled_shadow" if step == "compiled_step" else "eager_shadow"


def _train(run: StageRun) -> bool:
    """The compiled step runs in train mode where the eager backward passed (harness.stages.compile)."""
    backward = run.result.stages.get("backward")
    return backward is not None and backward.status == Status.PASS and run.train_output is not None


def _run_step(run: StageRun, step: str, mode: ShadowMode) -> str:
    """Run one step under the shadow; the device's own exception, if it raised, as text."""
    from harness.rootcause import steps

    try:
        if step == "eval_forward":
            steps.eval_forward(run, mode)
        elif step == "train_step":
            steps.train_step(run, mode)
        else:
            steps.compiled_step(run, mode, _train(run))
    except Exception as exc:  # noqa: BLE001 - the step's own failure (the shadow may have its call)
        mode.step_error, mode.step_phase = exc, mode.phase
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return ""
