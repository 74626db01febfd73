"""Root causes of a step the shadow saw fail without seeing the failing call.

A backend that lowers whole functions above the dispatcher (its own TorchFunctionMode) raises and
returns there, where the shadow's dispatch mode never looks. The step's own exception still says
what broke, and the function observer (harness.rootcause.functions) what it saw:

- a backward that found no autograd history: the first forward call whose device output lost
  `requires_grad` where the same call on the CPU keeps it (route `function_shadow`), else a record
  that says the harness could not see the call;
- any other error: the op the exception names (contracts.errors.classify), else the function call
  that raised on the device, placed by the traceback: the innermost module of the model that was
  running and the model's source line (route `exception`). No repro: the call's inputs on the
  device were not captured.
"""

from __future__ import annotations

from typing import Any

from contracts.errors import classify
from contracts.rootcause import RootCause
from harness.rootcause import calls
from harness.rootcause.functions import FunctionCall

NO_REPRO = "no repro: the call ran where the shadow does not see it, so its device inputs were not captured"


def root_cause(run: Any, step: str, mode: Any, searched: list[str]) -> RootCause | None:
    """The record of a step that raised where the shadow found no call (None when it did not raise)."""
    exc = mode.step_error
    if exc is None:
        return None
    phase = "backward" if mode.step_phase == "backward" else "forward"
    info = classify(exc)
    message = f"{info.error_class}: {info.message}"[:200]
    extra: dict[str, Any] = {"searched": searched, "functions_seen": mode.functions.count}
    if step == "train_step" and phase == "backward" and getattr(mode, "loss_without_grad", False):
        lost = mode.functions.lost_grad
        if lost is not None:
            return _lost_grad(lost, message, extra)
        return RootCause.not_found(
            "the backend returned a tensor without autograd history from a call the harness cannot "
            f"see: no forward call it saw lost it ({message})",
            **extra,
        )
    raised = mode.functions.raised
    module_path, source_line = calls.traceback_place(exc, run.model, mode.model_dirs)
    op, facts = info.failing_op, ([], [], [])
    extra["op_from"] = "the exception"
    if not op and raised is not None:
        op, facts = raised.name, raised.facts
        extra["op_from"] = "the function call that raised"
    module_path = module_path or (raised.module_path if raised else "")
    source_line = source_line or (raised.source_line if raised else "")
    where = f" in {module_path}" if module_path else ""
    at = f" at {source_line}" if source_line else ""
    if not op:
        return RootCause.not_found(
            f"the device raised {message}{where}{at}; the error names no op and no call the harness "
            "saw raised it",
            **extra,
        )
    shapes, dtypes, strides = facts
    return RootCause(
        found=True,
        why=f"{op} raised on the device ({message}){where}{at}; the shadow saw no call raise it: "
        f"named by the {extra['op_from'].removeprefix('the ')}; {NO_REPRO}",
        op=op,
        phase=phase,
        kind="error",
        route="exception",
        input_shapes=shapes,
        input_dtypes=dtypes,
        input_strides=strides,
        error_class=info.error_class,
        message=info.message,
        module_path=module_path,
        source_line=source_line,
        repro=None,
        extra=extra,
    )


def _lost_grad(lost: FunctionCall, message: str, extra: dict[str, Any]) -> RootCause:
    shapes, dtypes, strides = lost.facts
    where = f" in {lost.module_path}" if lost.module_path else ""
    return RootCause(
        found=True,
        why=f"{lost.name} returned a tensor without autograd history on the device where the same "
        f"call on the CPU has it (forward function call {lost.index}{where}), so backward raised "
        f"({message}); {NO_REPRO}",
        op=lost.name,
        phase="forward",
        kind="error",
        route="function_shadow",
        call_index=lost.index,
        input_shapes=shapes,
        input_dtypes=dtypes,
        input_strides=strides,
        error_class=message.split(":", 1)[0],
        message=message.split(": ", 1)[-1],
        module_path=lost.module_path,
        source_line=lost.source_line,
        repro=None,
        extra=extra | lost.evidence,
    )
