"""What the stages of one model check share: the run's objects, and how a stage ends early.

`harness.stages.check` drives the stages; the longer ones live in modules of their own
(`harness.stages.compile`, `harness.stages.numerics`) and all take the one `StageRun`.

Device work (moving to and from the device, running on it) happens inside the adapter's
`device_scope()` (`tracked`, `on_device`); the CPU model, its copies and the references never do,
so a backend implemented with global modes sees only its own part (contracts.backends).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from contracts.backends import Backend
from contracts.records import ModelCheck, ModelSpec


@dataclass
class StageRun:
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
    output: Any = None  # the eager device forward's output (eval mode, with grad)
    train_output: Any = None  # the eager device training step's output (train mode: the backward stage)
    loss: Any = None  # the eager device training step's loss (detached)
    fallback_events: list = field(default_factory=list)
    reference: Any = None  # harness.stages.reference.StepReference, computed once when first needed
    reference_forward: str | None = None  # why the forward fails on the cpu reference too ("" passes there)


def to_device(x: Any, device: torch.device, dtype: torch.dtype | None = None) -> Any:
    if isinstance(x, torch.Tensor):
        x = x.to(device)
        return x.to(dtype) if dtype is not None and x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: to_device(v, device, dtype) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device, dtype) for v in x)
    if _stateful(x):
        return _object_to_device(copy.deepcopy(x), device, dtype, depth=2)
    return x


_PLAIN = (
    torch.Tensor,
    int,
    float,
    bool,
    str,
    bytes,
    type(None),
    list,
    tuple,
    dict,
    set,
    torch.device,
    torch.dtype,
)


def _stateful(x: Any) -> bool:
    """An input object that is neither data nor a class or function (a video tracker's session)."""
    return (
        not isinstance(x, _PLAIN) and hasattr(x, "__dict__") and not isinstance(x, type) and not callable(x)
    )


def _object_to_device(obj: Any, device: torch.device, dtype: torch.dtype | None, depth: int) -> Any:
    """A session object on the device: its tensors (and those of the objects it holds, e.g. its
    cache) move, the fields naming a device name this one, its dtype field names `dtype`."""
    for k, v in list(vars(obj).items()):
        if isinstance(v, dict) and type(v) is not dict:  # (an OrderedDict or defaultdict stays one)
            v.update({key: to_device(item, device, dtype) for key, item in v.items()})
        elif isinstance(v, (torch.Tensor, dict, list, tuple)):
            setattr(obj, k, to_device(v, device, dtype))
        elif isinstance(v, (str, torch.device)) and (k == "device" or k.endswith("_device")):
            setattr(obj, k, device)
        elif k == "dtype" and isinstance(v, torch.dtype) and dtype is not None:
            setattr(obj, k, dtype)
        elif depth > 0 and _stateful(v):
            _object_to_device(v, device, dtype, depth - 1)
    return obj


def fresh(kwargs: dict) -> dict:
    """The kwargs for one forward call: an input that is a stateful object, not data (a video
    tracker's inference session, which each forward fills with its outputs and consumes the
    prompts of), is a copy of the one the inputs made, so every call sees it as made."""
    return {k: copy.deepcopy(v) if _stateful(v) else v for k, v in kwargs.items()}


def on_device(run: StageRun):
    """The device's scope: what runs in it is the device's part of a stage."""
    return run.adapter.device_scope()


def tracked(run: StageRun, fn: Callable[[], Any]) -> Any:
    """Run `fn` in the device scope with the backend's CPU-fallback events collected into the run."""
    with run.adapter.device_scope(), run.adapter.track_fallbacks() as events:
        value = fn()
        run.adapter.synchronize()
    run.fallback_events.extend(events)
    return value
