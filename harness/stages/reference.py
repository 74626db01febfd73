"""The CPU reference a device's training step is judged against, computed as the device computes.

A device in a reduced-precision mode (the bundled one's default `bf16`: fp32 matmul-class ops see
bf16-rounded inputs, everything else is fp32) differs from a plain float64 reference by its
documented rounding; judged against that reference, every model output carries a ~1% bf16 error
and a real 1% error in softmax or layer-norm hides under it. So the reference applies the same
rounding to the same arguments of the same ops, which the backend declares
(`rounded_inputs()` of the adapter: op packet -> argument names); the residual is then only the
device's own error and every op is judged with fp32 tolerances (harness/data/numerics.yaml).

Two reference runs, as in PyTorch's dynamo benchmarks (`torch._dynamo.utils.same`): the model in
float64 (the truth) and the CPU float32 eager model (how far float32 arithmetic itself is from the
truth, the RMSE gate's yardstick). Both run scaled-dot-product attention on the math path — the
textbook definition, and the path the bundled device takes — so the CPU's fused kernels are not
mistaken for device error.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from agents.quiet import quiet_transformers
from harness.stages.step import parameter_grads, train_mode

LossFn = Callable[[Any], "tuple[torch.Tensor, str]"]


class DeviceRounding(TorchDispatchMode):
    """Round the declared floating inputs of the declared ops to `dtype` (kept in their own dtype)."""

    def __init__(
        self,
        rounded: Mapping[str, Sequence[str]],
        device_key: str | None = None,
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        super().__init__()
        self.rounded = {str(k): tuple(v) for k, v in rounded.items()}
        self.device_key = device_key
        self.dtype = dtype
        self._plans: dict[Any, tuple[tuple[int, ...], frozenset[str], bool]] = {}
        self._inside: set[Any] = set()

    def _round(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype in (torch.float32, torch.float64):
            return x.to(self.dtype).to(x.dtype)
        if isinstance(x, (list, tuple)):
            return type(x)(self._round(v) for v in x)
        return x

    def _decomposed_on_device(self, func: Any) -> bool:
        """Does the device run `func` as its CompositeExplicitAutograd decomposition (no kernel of its
        own)? Then the ops inside it are what the device rounds (aten._grouped_mm as mm.out), and the
        reference must see them too."""
        if self.device_key is None:
            return False
        name, has = func.name(), torch._C._dispatch_has_kernel_for_dispatch_key
        try:
            return (
                has(name, "CompositeExplicitAutograd")
                and not has(name, self.device_key)
                and not has(name, "CompositeExplicitAutogradNonFunctional")
            )
        except RuntimeError:
            return False

    def _plan(self, func: Any) -> tuple[tuple[int, ...], frozenset[str], bool]:
        plan = self._plans.get(func)
        if plan is None:
            names = self.rounded.get(str(func.overloadpacket), ())
            schema_args = func._schema.arguments if names else []
            plan = (
                tuple(i for i, a in enumerate(schema_args) if a.name in names),
                frozenset(names),
                not names and self._decomposed_on_device(func),
            )
            self._plans[func] = plan
        return plan

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        positions, names, decompose = self._plan(func)
        if decompose and func not in self._inside:
            self._inside.add(func)  # a decomposition that calls its own op runs it as the CPU does
            try:
                with self:  # the decomposition's own ops come back through this mode
                    return func._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)
            finally:
                self._inside.discard(func)
        if positions or names:
            args = tuple(self._round(a) if i in positions else a for i, a in enumerate(args))
            kwargs = {k: self._round(v) if k in names else v for k, v in kwargs.items()}
        try:
            return func(*args, **kwargs)
        except RuntimeError as exc:
            # A wrapped-number tensor of a composite kernel (`remainder.Scalar` calls `.Tensor` with
            # `2` wrapped) reaches a dispatch mode as a Python number; the overload packet resolves
            # it to the Scalar overload, as PyTorch does (and as backend/kernels.py does on the device).
            if "Expected a value of type 'Tensor'" not in str(exc):
                raise
            return func.overloadpacket(*args, **kwargs)


@contextlib.contextmanager
def as_the_device_computes(
    rounded: Mapping[str, Sequence[str]] | None, device_key: str | None = None
) -> Iterator[None]:
    """CPU execution with the device's declared input rounding and math-path attention; `device_key`
    (e.g. "PrivateUse1") says which ops the device only receives decomposed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with contextlib.ExitStack() as stack:
        stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        if rounded:
            stack.enter_context(DeviceRounding(rounded, device_key))
        yield


@dataclass
class ReferenceRun:
    """One CPU run of the training step: the outputs, the loss and every parameter's gradient."""

    output: Any = None  # eval mode, no grad
    train_output: Any = None  # the training step's (train mode)
    loss: torch.Tensor | None = None
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    error: str = ""  # why the backward part could not run (the outputs are still there)


@dataclass
class StepReference:
    """What a model's training step on the device is judged against: the float64 truth and the CPU
    float32 eager run (the RMSE gate's yardstick). Not registry.replay.OpReference (the CPU's
    outputs of one op call)."""

    truth: ReferenceRun  # float64 (or float32 when the model cannot run in float64: `kind` says)
    eager: ReferenceRun  # CPU float32, same rounding
    kind: str  # cpu_float64 | cpu_float32
    rounding: str  # "none" or "bf16 inputs of N op classes" (what the reference emulated)


def _to(x: Any, dtype: torch.dtype | None) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if dtype is not None and x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: _to(v, dtype) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, dtype) for v in x)
    return x


def dispatch_key(device_type: str) -> str:
    """The dispatcher key of a device's kernels ("PrivateUse1" for an out-of-tree device)."""
    return "PrivateUse1" if device_type == torch._C._get_privateuse1_backend_name() else device_type.upper()


def run_step(
    model: torch.nn.Module,
    kwargs: dict,
    seed: int,
    loss_fn: LossFn | None,
    rounded: Mapping[str, Sequence[str]] | None,
    device_key: str | None = None,
) -> ReferenceRun:
    """As the device stages run it, on the CPU: the eval-mode forward (`forward`), then the
    training step (`backward`: a train-mode forward, the loss, backward)."""
    run = ReferenceRun()
    with quiet_transformers(), as_the_device_computes(rounded, device_key):
        torch.manual_seed(seed)
        with torch.no_grad():
            run.output = model(**kwargs)
        if loss_fn is None:
            return run
        try:
            with train_mode(model):
                torch.manual_seed(seed)
                run.train_output = model(**kwargs)
                loss, _ = loss_fn(run.train_output)
                loss.backward()
            run.loss = loss.detach()
            run.grads = {n: g.detach() for n, g in parameter_grads(model).items()}
        except Exception as exc:  # noqa: BLE001 - outputs still compare; the gradient check says why not
            run.error = f"{type(exc).__name__}: {exc}"[:300]
    return run


def compute_reference(
    cpu_model: torch.nn.Module,
    cpu_kwargs: dict,
    seed: int,
    loss_fn: LossFn | None,
    rounded: Mapping[str, Sequence[str]] | None,
    device_key: str | None = None,
) -> StepReference:
    """The float64 truth and the float32 eager run of the same step, rounded as the device rounds.

    The CPU model is copied (its gradients and buffers stay untouched)."""
    rounding = f"bf16 inputs of {len(rounded)} op classes" if rounded else "none"
    eager = run_step(copy.deepcopy(cpu_model), cpu_kwargs, seed, loss_fn, rounded, device_key)
    try:
        truth = run_step(
            copy.deepcopy(cpu_model).to(torch.float64),
            _to(cpu_kwargs, torch.float64),
            seed,
            loss_fn,
            rounded,
            device_key,
        )
        kind = "cpu_float64"
    except Exception:  # noqa: BLE001 - a model that cannot run in float64: the float32 run is the truth
        truth, kind = eager, "cpu_float32"
    return StepReference(truth=truth, eager=eager, kind=kind, rounding=rounding)
