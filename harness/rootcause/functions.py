"""The device's calls above the dispatcher: a `TorchFunctionMode` that watches each torch function
a step calls on device tensors.

A backend may lower whole functions (`F.linear`, `F.scaled_dot_product_attention`) in its own
TorchFunctionMode: such a call never reaches the dispatcher, so the shadow's dispatch mode
(harness.rootcause.shadow) never sees it, nor the error it raises, nor what it returns. Entered
above the backend's modes, this observer sees them, and keeps two facts the shadow cannot:

- `raised`: the innermost function call that raised on the device (its name, where it ran, its
  inputs' shapes), for a failure no aten call the shadow saw explains;
- `lost_grad`: the first call whose device output has no autograd history where the same call on
  the CPU, with the same inputs requiring grad, has it: the root cause of a backward that finds a
  loss without `grad_fn`.

Functions are named as PyTorch's override machinery names them (`torch.nn.functional.linear`,
`torch.Tensor.add`): a call above the dispatcher has no aten overload.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

from harness.rootcause import calls


@dataclass
class FunctionCall:
    """One function call on the device, where it ran and what it was given."""

    name: str
    index: int
    module_path: str = ""
    source_line: str = ""
    facts: tuple[list, list, list] = ([], [], [])
    error_class: str = ""
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)


def function_name(func: Any) -> str:
    name = resolve_name(func)
    if name:
        return name
    return f"{getattr(func, '__module__', '') or ''}.{getattr(func, '__qualname__', repr(func))}".strip(".")


class FunctionShadow(TorchFunctionMode):
    """Watch the device's function calls (see the module docstring) for `shadow`, whose stack of
    running modules, model code and deadline it shares; `track_grad` arms the autograd history
    check (the forward of a training step)."""

    def __init__(self, shadow: Any) -> None:
        super().__init__()
        self.shadow = shadow
        self.track_grad = False
        self.count = 0
        self.raised: FunctionCall | None = None
        self.lost_grad: FunctionCall | None = None
        self._depth = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not calls.involves(self.shadow.device_type, args, kwargs):
            return func(*args, **kwargs)
        index = self.count
        self.count += 1
        self._depth += 1
        try:
            out = func(*args, **kwargs)
        except Exception as exc:
            if self.raised is None:  # the innermost call sees the exception first
                self.raised = self._call(func, index, args, kwargs)
                self.raised.error_class = type(exc).__name__
                self.raised.message = str(exc).splitlines()[0][:300] if str(exc) else ""
            raise
        finally:
            self._depth -= 1
        if self.track_grad and self.lost_grad is None and self._depth == 0:
            self._check_grad(func, index, args, kwargs, out)
        return out

    # ------------------------------------------------------------------ autograd history

    def _check_grad(self, func: Any, index: int, args: tuple, kwargs: dict, out: Any) -> None:
        """Record the call when its floating device outputs lack autograd history that the same
        call on the CPU gives them (an outermost call only: what it called inside is its own)."""
        if not torch.is_grad_enabled() or time.monotonic() > self.shadow.deadline:
            return
        if not any(isinstance(x, torch.Tensor) and x.requires_grad for x in tree_flatten((args, kwargs))[0]):
            return
        lost = [i for i, t in enumerate(_tensors(out)) if _floating(t) and not t.requires_grad]
        if not lost:
            return
        armed, self.shadow.armed = self.shadow.armed, False  # the copies are not the device's calls
        try:
            ref = _reference_outputs(func, args, kwargs, self.shadow.device_type)
        except Exception:  # noqa: BLE001 - the CPU cannot run the call: not judged
            return
        finally:
            self.shadow.armed = armed
        kept = [i for i in lost if i < len(ref) and ref[i].requires_grad]
        if kept:
            self.lost_grad = self._call(func, index, args, kwargs)
            self.lost_grad.evidence = {"outputs_without_grad": kept, "reference": "cpu"}

    def _call(self, func: Any, index: int, args: tuple, kwargs: dict) -> FunctionCall:
        return FunctionCall(
            name=function_name(func),
            index=index,
            module_path=self.shadow.module_stack[-1] if self.shadow.module_stack else "",
            source_line=calls.source_line(self.shadow.model_dirs, skip=3),
            facts=calls.tensor_facts(tuple(args), dict(kwargs)),
        )


def _tensors(out: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def _floating(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _reference_outputs(func: Any, args: tuple, kwargs: dict, device_type: str) -> list[torch.Tensor]:
    """The call on CPU copies of its inputs, each requiring grad as the device's did, outside every
    mode (the backend's included)."""

    def copy(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.device.type == device_type:
            c = calls.to_cpu(x)
            return c.requires_grad_(x.requires_grad) if _floating(c) else c
        return x

    ref_args, ref_kwargs = tree_map(copy, (tuple(args), dict(kwargs)))
    with _disable_current_modes(), torch._C.DisableTorchFunction(), torch.enable_grad():
        return _tensors(func(*ref_args, **ref_kwargs))
