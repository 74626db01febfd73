"""The backend protocol: how the harness talks to a device without knowing which one it is.

An adapter *declares* what its backend can do (fields, not probed attributes): whether it reports
CPU fallbacks, the torch.compile backend name, whether the device is simulated. A stage the
backend cannot report (fallbacks on cuda, compile without a compiler) is `not_attempted`, never
`pass`; a figure it cannot report (fallback count, graphs, recompiles) is null, never 0.

    from contracts.backends import get_backend, to_cpu
    adapter = get_backend("neuron")           # or "cpu", "cuda", a registered name, "MODULE:DEVICE"
    with adapter.device_scope(), adapter.track_fallbacks() as events:  # events filled on exit
        out = model(x.to(adapter.device))
    fallback_count(events), fallback_ops(events), to_cpu(adapter, out)

Where device work happens: the harness enters `device_scope()` only around the device's part of
a stage (moving tensors to and from the device, running on it); the CPU model copy, the CPU
references, meta-device shape planning and blame re-runs run outside it. A backend implemented
with global modes (torchax: TorchFunctionMode + TorchDispatchMode) enters them there, so they never
intercept the harness's own CPU work. `activate()` is called once per process before the adapter
is used: it imports and switches on the backend (the simulator registers the device there).

Adapters are found by name: the built-in `cpu` and `cuda`, then the entry-point group
``harness.backends`` (the bundled simulator registers `neuron = backend.adapter:NeuronBackend`; a
real torch-neuronx package, or adapters/torchax in this repository, plugs in the same way, without
harness changes), then ``register_backend`` (tests). An entry point's value is a factory called
with the name the user typed. ``TARGET:DEVICE`` (the device after the last colon) resolves TARGET
with `pkgutil.resolve_name`: a module is imported (it registers the PyTorch device DEVICE), a
callable is imported and called once as the activation hook (``torchax.enable_globally:jax``);
then the adapter registered for DEVICE is used if there is one, else a generic adapter that
reports no fallbacks (docs/backends.md).
"""

from __future__ import annotations

import contextlib
import pkgutil
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from contracts.errors import AdapterError
from contracts.plugins import entry_points

ENTRY_POINT_GROUP = "harness.backends"


@runtime_checkable
class Backend(Protocol):
    """What every backend adapter offers (structural: an adapter need not import this module; one
    that does can inherit `BackendDefaults` for the members it has nothing to say about)."""

    name: str  # what the user typed: "neuron", "cpu", "mydev", "mymod:mydev"
    device_type: str  # the torch device type
    # declared capabilities
    reports_fallbacks: bool  # track_fallbacks() sees the ops that ran on the CPU instead
    compile_backend: str | None  # name for torch.compile(backend=...); None: cannot compile
    # the CPU torch.compile backend that follows the same pipeline as compile_backend (e.g.
    # "aot_eager" for an AOTAutograd compiler); blame's cpu reference compiles with it
    # (harness.blame.compile.compile_reference). None: the reference compiles with inductor.
    reference_compile_backend: str | None
    simulated: bool | None  # True: a simulator; False: real hardware/software; None: unknown

    @property
    def device(self) -> Any: ...  # torch.device

    def is_available(self) -> bool: ...

    def activate(self) -> None:
        """Import and switch on the backend; called once per process before the adapter is used
        (get_backend does it), and idempotent. Raises with the reason when it cannot."""
        ...

    def device_scope(self) -> ContextManager[None]:
        """The context the device's part of a stage runs in (a backend's global modes); the
        harness's CPU work runs outside it. Re-entering it while it is active must be harmless."""
        ...

    def track_fallbacks(self) -> ContextManager[list[dict[str, Any]]]:
        """A block's CPU-fallback events: the yielded list is filled with one dict per event group
        (op, count, reason, input_shapes, input_dtypes, frame) when the block exits; empty when the
        backend cannot report."""
        ...

    def precision_mode(self) -> str:
        """The numeric mode tolerances are loosened for: "exact", or e.g. "bf16" (auto-cast)."""
        ...

    def rounded_inputs(self) -> dict[str, tuple[str, ...]]:
        """What the device computes in, where it is not the tensors' dtype: op packet (e.g.
        "aten.mm") -> names of the float32 arguments it rounds to bfloat16 in the current precision
        mode. The numerics reference rounds the same arguments (harness.stages.reference), so
        only the device's own error is judged. Empty: computes as the dtypes say."""
        ...

    def op_fingerprints(self) -> dict[str, Any]:
        """{"ops": {op: fingerprint}} of what decides each op's lowering and kernels: the runner
        runs the cases whose ops changed since the baseline first. {}: the backend has none."""
        ...

    def reset_peak_memory(self) -> None: ...

    def peak_memory(self) -> int | None: ...  # bytes since reset_peak_memory, None when unknown

    def synchronize(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """The backend's identity for runs.parquet, the report header and `harness doctor`:
        backend, device, available, simulated, reports_fallbacks, compile_backend (describe_common),
        `versions` {distribution or component: version} and `settings` {name: value} (what was
        tested), plus the device's own facts where it has them (lowering_table {version, source,
        native_ops}, ...)."""
        ...


#: every member of the protocol: get_backend refuses an adapter without one of them, by name
PROTOCOL_MEMBERS: tuple[str, ...] = (
    "name",
    "device_type",
    "reports_fallbacks",
    "compile_backend",
    "reference_compile_backend",
    "simulated",
    "device",
    "is_available",
    "activate",
    "device_scope",
    "track_fallbacks",
    "precision_mode",
    "rounded_inputs",
    "op_fingerprints",
    "reset_peak_memory",
    "peak_memory",
    "synchronize",
    "describe",
)


def fallback_count(events: Iterable[dict[str, Any]]) -> int:
    return sum(int(e.get("count", 1)) for e in events)


def fallback_ops(events: Iterable[dict[str, Any]]) -> list[str]:
    return sorted({str(e["op"]) for e in events if e.get("op")})


def to_cpu(adapter: Backend, value: Any) -> Any:
    """`value` (tensors in dicts, lists, tuples) detached and on the CPU, moved inside the device
    scope: a device tensor may need the backend's modes even to leave the device."""
    import torch
    from torch.utils._pytree import tree_map_only

    with adapter.device_scope():
        return tree_map_only(torch.Tensor, lambda t: t.detach().to("cpu"), value)


class BackendDefaults:
    """What an adapter that has nothing to say about a member answers: no fallback reporting, no
    compiler, nothing to activate, no scope, exact precision, no memory figures. Inherit it and
    declare the rest (`name`, `device_type`, `device`, `describe` at least)."""

    reports_fallbacks: bool = False
    compile_backend: str | None = None
    reference_compile_backend: str | None = None
    simulated: bool | None = None

    def is_available(self) -> bool:
        return True

    def activate(self) -> None:
        return None

    def device_scope(self) -> ContextManager[None]:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def track_fallbacks(self):
        yield []

    def precision_mode(self) -> str:
        return "exact"

    def rounded_inputs(self) -> dict[str, tuple[str, ...]]:
        return {}

    def op_fingerprints(self) -> dict[str, Any]:
        return {}

    def reset_peak_memory(self) -> None:
        return None

    def peak_memory(self) -> int | None:
        return None

    def synchronize(self) -> None:
        return None


@dataclass
class TorchDeviceBackend(BackendDefaults):
    """A plain torch device (cpu, cuda, or a TARGET:DEVICE without an adapter of its own):
    no fallback reporting, memory statistics from `torch.<device>` when it has them. `activation`
    is the TARGET:DEVICE's callable, called once by activate()."""

    name: str
    device_type: str
    compile_backend: str | None = None
    reports_fallbacks: bool = False
    simulated: bool | None = None
    activation: Callable[[], Any] | None = None
    activation_name: str | None = None
    _activated: bool = False

    def _module(self) -> Any:
        import torch

        return getattr(torch, self.device_type, None)

    @property
    def device(self) -> Any:
        import torch

        return torch.device(self.device_type)

    def is_available(self) -> bool:
        if self.device_type == "cpu":
            return True
        mod = self._module()
        return bool(mod is not None and mod.is_available())

    def activate(self) -> None:
        if self.activation is not None and not self._activated:
            self.activation()
        self._activated = True

    def reset_peak_memory(self) -> None:
        mod = self._module()
        if mod is not None and hasattr(mod, "reset_peak_memory_stats"):
            with contextlib.suppress(Exception):
                mod.reset_peak_memory_stats()

    def peak_memory(self) -> int | None:
        mod = self._module()
        if mod is not None and hasattr(mod, "max_memory_allocated"):
            with contextlib.suppress(Exception):
                return int(mod.max_memory_allocated())
        return None

    def synchronize(self) -> None:
        mod = self._module()
        if mod is not None and hasattr(mod, "synchronize"):
            mod.synchronize()

    def describe(self) -> dict[str, Any]:
        import torch

        settings: dict[str, Any] = {}
        if self.activation_name:
            settings["activation"] = self.activation_name
        return describe_common(self) | {
            "versions": {"torch": torch.__version__},
            "settings": settings,
            "lowering_table": None,
            "fallback_mode": None,
            "precision": None,
            "memory_capacity_bytes": None,
        }


def describe_common(adapter: Backend) -> dict[str, Any]:
    """The protocol's own fields of describe()."""
    return {
        "backend": adapter.name,
        "device": adapter.device_type,
        "available": adapter.is_available(),
        "simulated": adapter.simulated,
        "reports_fallbacks": adapter.reports_fallbacks,
        "compile_backend": adapter.compile_backend,
        "reference_compile_backend": adapter.reference_compile_backend,
    }


def kind(simulated: bool | None) -> str:
    """What `harness doctor` calls a backend: simulated, real, or unknown (it did not say)."""
    return {True: "simulated", False: "real"}.get(simulated, "unknown")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ registry

Factory = Callable[[str], Backend]

_BUILTIN: dict[str, Factory] = {
    "cpu": lambda name: TorchDeviceBackend(name, "cpu", compile_backend="inductor", simulated=False),
    "cuda": lambda name: TorchDeviceBackend(name, "cuda", compile_backend="inductor", simulated=False),
}
_REGISTERED: dict[str, Factory] = {}


def register_backend(name: str, factory: Factory) -> None:
    """Register an adapter factory under `name` for this process (the entry point does it for a
    package)."""
    _REGISTERED[name] = factory
    _CACHE.pop(name, None)


def _entry_points() -> dict[str, EntryPoint]:
    return entry_points(ENTRY_POINT_GROUP)


def _entry_point(name: str) -> Factory | None:
    ep = _entry_points().get(name)
    return ep.load() if ep is not None else None


def backend_names() -> list[str]:
    """Every name `get_backend` resolves without TARGET:DEVICE."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_entry_points()))


def _factory(name: str) -> Factory | None:
    return _REGISTERED.get(name) or _BUILTIN.get(name) or _entry_point(name)


def _generic(target: str, device_type: str, spec: str) -> Backend:
    """TARGET:DEVICE: TARGET a module (imported: it registers the device) or a callable (imported,
    and called by activate(): the activation hook)."""
    resolved = pkgutil.resolve_name(target)
    activation = None if isinstance(resolved, ModuleType) else resolved
    if activation is not None and not callable(activation):
        raise ValueError(f"backend {spec!r}: {target!r} is neither a module nor a callable")
    factory = _factory(device_type)
    if factory is not None:
        if activation is not None:
            activation()
        return factory(spec)
    from torch._dynamo import list_backends

    compile_backend = device_type if device_type in list_backends(exclude_tags=()) else None
    return TorchDeviceBackend(
        spec,
        device_type,
        compile_backend=compile_backend,
        activation=activation,
        activation_name=target if activation is not None else None,
    )


def check_adapter(adapter: Any, spec: str) -> Backend:
    """`adapter` if it has every protocol member, else AdapterError naming the missing ones."""
    present = set(dir(adapter))  # not hasattr: it would evaluate a property before activate()
    missing = [m for m in PROTOCOL_MEMBERS if m not in present]
    if missing:
        raise AdapterError(
            f"backend {spec!r}: adapter {type(adapter).__module__}.{type(adapter).__qualname__} lacks "
            f"{', '.join(missing)} (contracts.backends.Backend; inherit BackendDefaults for defaults)"
        )
    return adapter


_CACHE: dict[str, Backend] = {}


def get_backend(spec: str) -> Backend:
    """Resolve a `--backend` value to an activated adapter (one per process and spec). Raises
    ValueError with the accepted forms, AdapterError for an adapter that misses members, or what
    the backend's activation raised."""
    adapter = _CACHE.get(spec)
    if adapter is None:
        adapter = check_adapter(_resolve(spec), spec)
        adapter.activate()
        _CACHE[spec] = adapter
    return adapter


def _resolve(spec: str) -> Backend:
    factory = _factory(spec)
    if factory is not None:
        return factory(spec)
    if ":" in spec:
        target, _, device_type = spec.rpartition(":")
        if target and device_type:
            return _generic(target, device_type, spec)
    raise ValueError(
        f"unknown backend {spec!r}: use {', '.join(backend_names())} or MODULE:DEVICE / "
        f"MODULE.CALLABLE:DEVICE (adapters register in the entry-point group {ENTRY_POINT_GROUP!r})"
    )


def resolved_backend(spec: str) -> Backend | None:
    """The adapter for `spec` if this process already resolved it, else None (never imports a
    backend: the runner stays light and cannot be broken by a device extension)."""
    return _CACHE.get(spec)


def identity(adapter: Backend) -> dict[str, Any]:
    """What runs.parquet, the report header and `harness doctor` record of a backend: its name,
    kind, versions and settings from describe() (a describe() that raises is recorded as such)."""
    try:
        info = adapter.describe()
    except Exception as exc:  # noqa: BLE001 - identity is a label: it never fails a run
        info = {"describe_error": f"{type(exc).__name__}: {exc}"[:300]}
    settings = dict(info.get("settings") or {})
    if "describe_error" in info:
        settings["describe_error"] = info["describe_error"]
    return {
        "backend_name": adapter.name,
        "backend_device": adapter.device_type,
        "backend_kind": kind(adapter.simulated),
        "backend_versions": {str(k): str(v) for k, v in (info.get("versions") or {}).items()},
        "backend_settings": settings,
    }
