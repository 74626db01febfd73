"""The shadow: every aten call a device step makes, re-run on the reference with the same inputs.

A `TorchDispatchMode` sees each call below autograd, forward and backward alike (autograd's
backward ops go through the dispatcher too, on the calling thread or the device's, whose thread
state carries the mode along). For each call that touches the device it copies the inputs to the
CPU, lets the device compute, recomputes the same overload on the copies as the device computes,
and judges every output by its tolerance class (harness.rootcause.calls). The first call in
dispatch order that fails is the root cause: each call is judged on the inputs the device gave
it, so what an earlier call got wrong is never charged to a later one. A call that raises on the
device while the reference computes it is the root cause of an error.

Where: the module a forward call ran in (forward hooks keep a stack of module names), the model's
source line (the innermost frame of the model's own code); a backward call takes both from the
forward call that made its autograd node (each new node is tagged with them as the next call
starts); a compiled graph's call from the FX node its generated code is running.

Bounded: past the deadline the step is stopped (`Stop`, a BaseException the model's own
`except Exception` cannot swallow) and the record says it gave up.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from contracts.rootcause import Mismatch, RootCause
from harness.rootcause import calls
from harness.rootcause.functions import FunctionShadow
from harness.stages.reference import DeviceRounding
from harness.stages.run import StageRun
from registry.encoding import encode_args

#: key of the (module path, source line) tag on an autograd node's metadata
_TAG = "harness.rootcause.where"


# A BaseException on purpose: the model's own `except Exception` must not swallow it.
class Stop(BaseException):
    """Ends a shadowed step: the root cause is found, or the time is up."""


@dataclass
class Finding:
    """The call that broke the step, with the device call's inputs on the CPU (for the repro)."""

    func: Any
    phase: str
    index: int
    kind: str  # mismatch | error
    args: tuple  # the device inputs, copied to the CPU before the call
    kwargs: dict
    module_path: str = ""
    source_line: str = ""
    mismatch: Mismatch | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    error_class: str = ""
    message: str = ""
    facts: tuple[list, list, list] = ([], [], [])
    encoded: tuple[list, dict] = ([], {})  # the device call's arguments as registry.encoding writes them

    @property
    def op(self) -> str:
        return str(self.func)

    def record(self, route: str, mode: ShadowMode | None = None) -> RootCause:
        """The record of the found call (contracts.rootcause), found by `route`."""
        shapes, dtypes, strides = self.facts
        where = f" in {self.module_path}" if self.module_path else ""
        if self.kind == "error":
            why = (
                f"{self.op} raised on the device ({self.error_class}: {self.message[:120]}) where the "
                f"reference computes the same call ({self.phase} call {self.index}{where})"
            )
        else:
            m = self.mismatch
            if m is not None and m.max_abs < 0:
                how = f"output {m.output} has another shape than the reference's"
            elif m is not None and m.tolerance_class == "exact":
                how = f"output {m.output} differs from the reference's (exact), max abs {m.max_abs:.3g}"
            elif m is not None:
                how = (
                    f"output {m.output} off by max abs {m.max_abs:.3g} (rel {m.max_rel:.3g}) beyond "
                    f"{m.tolerance_class} atol={m.atol:g} rtol={m.rtol:g}"
                )
                if self.evidence.get("method") == "nonfinite":
                    how = f"output {m.output} is non-finite where the reference is finite"
            else:
                how = "differs"
            why = (
                f"{self.op} differs from the reference on the same inputs "
                f"({self.phase} call {self.index}{where}): {how}"
            )
        if self.evidence.get("fails_alone") is False:
            why += "; no call of the minimal graph fails compiled alone (a fusion): named by its last call"
        extra: dict[str, Any] = dict(self.evidence)
        if mode is not None:
            extra.update(calls_judged=mode.judged, passed_by=dict(mode.passed_by))
        return RootCause(
            found=True,
            why=why,
            op=self.op,
            phase=self.phase,
            kind=self.kind,
            route=route,
            call_index=self.index,
            input_shapes=shapes,
            input_dtypes=dtypes,
            input_strides=strides,
            mismatch=self.mismatch,
            error_class=self.error_class,
            message=self.message,
            module_path=self.module_path,
            source_line=self.source_line,
            extra=extra,
        )


class ShadowMode(TorchDispatchMode):
    """Shadow the device's calls; `found` holds the first that fails (see the module docstring).

    `phase` is what the driver says runs now (forward, backward); a call inside a compiled graph
    (`compiled` > 0, or a backward node of a compiled function) is in phase `compiled`. With
    `only_compiled`, calls outside compiled graphs pass unjudged."""

    def __init__(
        self,
        device_type: str,
        rounding: DeviceRounding | None,
        undeclared_rounding: bool,
        deadline: float,
        model_dirs: tuple[str, ...] = (),
        only_compiled: bool = False,
        device_key: str | None = None,
    ) -> None:
        super().__init__()
        self.device_type = device_type
        self.device_key = device_key
        self.rounding = rounding
        self.undeclared_rounding = undeclared_rounding
        self.deadline = deadline
        self.model_dirs = model_dirs
        self.only_compiled = only_compiled
        self.phase = "forward"
        self.compiled = 0
        self.armed = True
        self.found: Finding | None = None
        self.gave_up = ""
        self.counts: Counter = Counter()
        self.judged = 0
        self.passed_by: Counter = Counter()
        self.module_stack: list[str] = []
        self._pending: list[tuple[torch.Tensor, tuple[str, str]]] = []
        self._decomposing: set[Any] = set()
        # the calls above the dispatcher (a backend's function-level lowerings), and the step's
        # own exception with the phase it ended in: what a failure the shadow did not see leaves
        self.functions = FunctionShadow(self)
        self.step_error: BaseException | None = None
        self.step_phase = ""
        self.loss_without_grad = False

    # ------------------------------------------------------------------ the hook

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (
            not self.armed
            or self.found is not None
            or self.gave_up
            or not calls.involves(self.device_type, args, kwargs)
            or calls.fake(args, kwargs)
        ):
            return func(*args, **kwargs)
        self._tag_pending()
        phase = self._current_phase()
        index = self.counts[phase]
        self.counts[phase] += 1
        if self.only_compiled and phase != "compiled":
            return func(*args, **kwargs)
        composite = (
            calls.decomposition(func, self.device_key) if self.device_key and not calls.mode_below() else ""
        )
        if composite and func not in self._decomposing:
            self._decomposing.add(func)  # the calls the device sees are judged, one by one
            try:
                with self:
                    return func._op_dk(getattr(torch._C.DispatchKey, composite), *args, **kwargs)
            finally:
                self._decomposing.discard(func)
        where = self._where(phase)
        why = calls.skip_reason(func)
        if why:
            self.passed_by[why] += 1
            out = func(*args, **kwargs)
            self._pend(out, where)
            return out
        if time.monotonic() > self.deadline:
            self.gave_up = f"time limit reached after {self.judged} judged calls"
            raise Stop
        try:
            ref_args = calls.to_reference(args, self.device_type)
            ref_kwargs = calls.to_reference(kwargs, self.device_type)
        except Exception:  # noqa: BLE001 - an input the device cannot hand over: not judged
            self.passed_by["inputs not copyable"] += 1
            out = func(*args, **kwargs)
            self._pend(out, where)
            return out
        try:
            out = calls.call_op(func, args, kwargs)
        except Exception as exc:
            ref = calls.recompute(func, ref_args, ref_kwargs, self.rounding)
            if not ref.error:  # the reference computes what the device refused: the device's error
                self.found = self._finding(
                    func, phase, index, "error", ref_args, ref_kwargs, where, args, kwargs
                )
                self.found.error_class = type(exc).__name__
                self.found.message = str(exc).splitlines()[0][:300] if str(exc) else ""
            raise
        self._pend(out, where)
        self.judged += 1
        ref = calls.recompute(func, ref_args, ref_kwargs, self.rounding)
        if ref.error:
            self.passed_by["reference raised"] += 1
            return out
        try:
            produced = [(n, calls.to_cpu(t)) for n, t in calls.outputs(func, out, args, kwargs)]
        except Exception:  # noqa: BLE001 - an output the device cannot hand over: not judged
            self.passed_by["outputs not copyable"] += 1
            return out
        try:
            # CPU work: outside the dispatch modes below this one (a backend's own mode)
            with _disable_current_modes():
                bad = self._judge(func, args, kwargs, produced, ref)
        except Exception:  # noqa: BLE001 - an output the gate cannot compare: not judged
            self.passed_by["outputs not comparable"] += 1
            return out
        if bad is not None:
            self.found = self._finding(
                func, phase, index, "mismatch", ref_args, ref_kwargs, where, args, kwargs
            )
            self.found.mismatch, self.found.evidence = bad
            raise Stop
        return out

    # ------------------------------------------------------------------ helpers

    def _judge(self, func, args, kwargs, produced, ref: calls.ReferenceCall):
        dim = calls.unordered_dim(func, args, kwargs)
        if dim is not None:  # outputs in no defined order: compared in value order
            produced = calls.in_value_order(produced, dim)
            ref = calls.ReferenceCall(
                calls.in_value_order(ref.eager, dim), calls.in_value_order(ref.truth, dim), ref.error
            )
        return calls.judge(produced, ref, self.undeclared_rounding, ties=calls.tie_outputs(func))

    def _finding(self, func, phase, index, kind, ref_args, ref_kwargs, where, args, kwargs) -> Finding:
        return Finding(
            func=func,
            phase=phase,
            index=index,
            kind=kind,
            args=ref_args,
            kwargs=ref_kwargs,
            module_path=where[0],
            source_line=where[1],
            facts=calls.tensor_facts(args, kwargs),
            encoded=encode_args(args, kwargs),
        )

    def _current_phase(self) -> str:
        if self.compiled > 0:
            return "compiled"
        node = torch._C._current_autograd_node()
        if node is not None and type(node).__name__.startswith("CompiledFunction"):
            return "compiled"
        return self.phase

    def _where(self, phase: str) -> tuple[str, str]:
        """(module path, source line) of the call being dispatched."""
        if phase == "compiled":
            return calls.node_place(calls.fx_node_of_frame(3), self.model_dirs)
        node = torch._C._current_autograd_node()
        if node is not None:  # a backward call: where the forward call that made its node ran
            try:
                tag = node.metadata.get(_TAG)
            except RuntimeError:
                tag = None
            return tag or ("", "")
        path = self.module_stack[-1] if self.module_stack else ""
        return path, calls.source_line(self.model_dirs, skip=3)

    def _pend(self, out: Any, where: tuple[str, str]) -> None:
        """Outputs whose autograd node is attached after this call returns: tagged at the next one."""
        if torch._C._current_autograd_node() is not None or not torch.is_grad_enabled():
            return
        flat = out if isinstance(out, (list, tuple)) else [out]
        self._pending = [(t, where) for t in flat if isinstance(t, torch.Tensor)]

    def _tag_pending(self) -> None:
        pending, self._pending = self._pending, []
        for t, where in pending:
            fn = t.grad_fn
            if fn is None:
                continue
            with contextlib.suppress(RuntimeError, AttributeError):
                fn.metadata.setdefault(_TAG, where)

    # ------------------------------------------------------------------ modules

    @contextlib.contextmanager
    def watching(self, model: torch.nn.Module) -> Iterator[None]:
        """Keep the stack of the modules whose forward runs (names as `named_modules` gives them)."""
        handles = []

        def enter(name: str):
            def hook(module, args):
                self.module_stack.append(name)

            return hook

        def leave(module, args, output):
            if self.module_stack:
                self.module_stack.pop()

        for name, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(enter(name)))
            handles.append(module.register_forward_hook(leave, always_call=True))
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            self.module_stack.clear()


def for_run(run: StageRun, deadline: float, only_compiled: bool = False) -> ShadowMode:
    """The shadow of a run's device: its declared rounding, its tolerance class, its model's code."""
    from harness.stages.numerics import rounded_inputs, undeclared_rounding
    from harness.stages.reference import DeviceRounding, dispatch_key

    rounded = rounded_inputs(run)
    rounding = DeviceRounding(rounded, dispatch_key(run.adapter.device_type)) if rounded else None
    return ShadowMode(
        run.adapter.device_type,
        rounding,
        undeclared_rounding(run),
        deadline,
        model_dirs=calls.model_code_dirs(run.model),
        only_compiled=only_compiled,
        device_key=dispatch_key(run.adapter.device_type),
    )
