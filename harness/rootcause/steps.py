"""The failing step again, on the device, under the shadow: the eval forward, the training step,
the compiled training step, as the stages ran them (harness.stages.check, step, compile).

The model, inputs and seed are the run's own (`StageRun`); parameter gradients and the buffers a
train-mode forward updates are put back afterwards, so the row's model is left as the stages left
it. Each driver returns when the step ends or the shadow stops it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from agents.quiet import quiet_transformers
from contracts.backends import Backend
from harness.errors import NoLoss
from harness.rootcause.shadow import ShadowMode, Stop
from harness.stages.run import StageRun, fresh
from harness.stages.step import restore_grads, stash_grads, train_mode, training_loss


def device_scope(adapter: Backend) -> contextlib.AbstractContextManager:
    """The backend's scope around the device's part of a step (the protocol declares it)."""
    return adapter.device_scope()


@contextlib.contextmanager
def _stopped() -> Iterator[None]:
    """A step the shadow stopped, or that raised on the device, ends here: the shadow has the
    finding (an exception the shadow did not judge is the driver's caller's to see)."""
    try:
        yield
    except Stop:
        pass


def eval_forward(run: StageRun, mode: ShadowMode) -> None:
    """The `forward` stage's call: eval mode, with grad (harness.stages.check._forward)."""
    mode.phase = "forward"
    with (
        _stopped(),
        device_scope(run.adapter),
        mode.watching(run.model),
        quiet_transformers(),
        mode,
        mode.functions,
    ):
        torch.manual_seed(run.seed)
        run.model(**fresh(run.kwargs))


def train_step(run: StageRun, mode: ShadowMode) -> None:
    """The `backward` stage's step: a train-mode forward (its function calls checked for lost
    autograd history), the loss, backward."""
    saved = stash_grads(run.model)
    try:
        with _stopped(), device_scope(run.adapter), train_mode(run.model), quiet_transformers():
            mode.phase = "forward"
            mode.functions.track_grad = True
            with mode.watching(run.model), mode, mode.functions:
                torch.manual_seed(run.seed)
                output = run.model(**fresh(run.kwargs))
                try:
                    loss, _ = training_loss(output)
                except NoLoss:
                    return
            mode.phase = "backward"
            mode.loss_without_grad = not loss.requires_grad
            with mode:
                loss.backward()
    finally:
        restore_grads(run.model, saved)


def compiled_step(run: StageRun, mode: ShadowMode, train: bool) -> None:
    """The `compile` stage's step with the backend's compiler, twice, as the stage runs it. Dynamo
    runs no compiled code while a dispatch mode is on its stack, so the shadow is entered by a
    wrapper around what the backend returns (the forward graphs), and around backward. The first
    step compiles: its forward graphs run shadowed (an error at run time is found there), its
    backward, compiled lazily on its first call, runs plain; the second step shadows the backward."""
    import torch._dynamo
    from torch._dynamo.backends.registry import lookup_backend

    inner = lookup_backend(run.adapter.compile_backend)
    compiled_model = torch.compile(run.model, backend=_shadowing(inner, mode))
    saved = stash_grads(run.model)
    torch._dynamo.reset()
    try:
        with device_scope(run.adapter), quiet_transformers(), _stopped():
            mode.armed = True
            _compiled_once(run, compiled_model, mode, train, shadow_backward=False)
            stash_grads(run.model)
            if train and mode.found is None:
                mode.armed = False  # its forward was judged in the first step
                _compiled_once(run, compiled_model, mode, train, shadow_backward=True)
    finally:
        mode.armed = False
        restore_grads(run.model, saved)
        torch._dynamo.reset()


def _compiled_once(
    run: StageRun, compiled: Any, mode: ShadowMode, train: bool, shadow_backward: bool
) -> None:
    with train_mode(run.model) if train else contextlib.nullcontext():
        torch.manual_seed(run.seed)
        output = compiled(**run.kwargs)
        if not train:
            return
        try:
            loss, _ = training_loss(output)
        except NoLoss:
            return
        if not shadow_backward:
            loss.backward()
            return
        mode.phase, mode.armed = "backward", True
        try:
            with mode:
                loss.backward()
        finally:
            mode.phase = "forward"


def _shadowing(inner: Callable, mode: ShadowMode) -> Callable:
    """A Dynamo backend that compiles with `inner` and runs what it returns inside the shadow."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        compiled = inner(gm, example_inputs)

        def run(*args: Any) -> Any:
            if not mode.armed:
                return compiled(*args)
            mode.compiled += 1
            try:
                with mode:
                    return compiled(*args)
            finally:
                mode.compiled -= 1

        return run

    return backend
