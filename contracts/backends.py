"""The backend protocol: how the harness talks to a device without knowing which one it is.

An adapter *declares* what its backend can do (fields, not probed attributes): whether it reports
CPU fallbacks, the torch.compile backend name, whether the device is simulated. A stage the
backend cannot report (fallbacks on cuda, compile without a compiler) is `not_attempted`, never
`pass`.

    from contracts.backends import get_backend
    adapter = get_backend("neuron")           # or "cpu", "cuda", a registered name, "MODULE:DEVICE"
    with adapter.track_fallbacks() as events: # a list, filled with one dict per event group on exit
        model(x.to(adapter.device))
    fallback_count(events), fallback_ops(events)

Adapters are found by name: the built-in `cpu` and `cuda`, then the entry-point group
``harness.backends`` (the bundled simulator registers `neuron = backend.adapter:NeuronBackend`; a
real torch-neuronx package plugs in the same way, without harness changes), then
``register_backend`` (tests). ``MODULE:DEVICE`` imports MODULE (which registers the PyTorch device
DEVICE) and uses the adapter registered for DEVICE if there is one, else a generic adapter that
reports no fallbacks. An entry point's value is a factory called with the name the user typed.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Any, ContextManager, Protocol, runtime_checkable

from contracts.plugins import entry_points

ENTRY_POINT_GROUP = "harness.backends"


@runtime_checkable
class Backend(Protocol):
    """What every backend adapter offers (structural: an adapter need not import this module)."""

    name: str  # what the user typed: "neuron", "cpu", "mydev", "mymod:mydev"
    device_type: str  # the torch device type
    # declared capabilities
    reports_fallbacks: bool  # track_fallbacks() sees the ops that ran on the CPU instead
    compile_backend: str | None  # name for torch.compile(backend=...); None: cannot compile
    # optional, read with getattr: `reference_compile_backend`, the CPU torch.compile backend that
    # follows the same pipeline as compile_backend (e.g. "aot_eager" for an AOTAutograd compiler);
    # blame's cpu reference compiles with it (harness.blame.compile.compile_reference)
    simulated: bool | None  # True: a simulator; None: not a neuron-like device, the question does not apply

    @property
    def device(self) -> Any: ...  # torch.device

    def is_available(self) -> bool: ...

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

    def reset_peak_memory(self) -> None: ...

    def peak_memory(self) -> int | None: ...  # bytes since reset_peak_memory, None when unknown

    def synchronize(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """backend, device, available, simulated, reports_fallbacks, compile_backend, plus the device's
        settings where it has them: lowering_table {version, source, native_ops}, fallback_mode,
        precision, memory_capacity_bytes (None otherwise)."""
        ...


def fallback_count(events: Iterable[dict[str, Any]]) -> int:
    return sum(int(e.get("count", 1)) for e in events)


def fallback_ops(events: Iterable[dict[str, Any]]) -> list[str]:
    return sorted({str(e["op"]) for e in events if e.get("op")})


def can_compile(adapter: Backend) -> bool:
    return adapter.compile_backend is not None


@dataclass
class TorchDeviceBackend:
    """A plain torch device (cpu, cuda, or a MODULE:DEVICE without an adapter of its own):
    no fallback reporting, memory statistics from `torch.<device>` when it has them."""

    name: str
    device_type: str
    compile_backend: str | None = None
    reports_fallbacks: bool = False
    simulated: bool | None = None

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

    @contextlib.contextmanager
    def track_fallbacks(self):
        yield []

    def precision_mode(self) -> str:
        return "exact"

    def rounded_inputs(self) -> dict[str, tuple[str, ...]]:
        return {}

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
        return describe_common(self) | {
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
    }


# ------------------------------------------------------------------------------------ registry

Factory = Callable[[str], Backend]

_BUILTIN: dict[str, Factory] = {
    "cpu": lambda name: TorchDeviceBackend(name, "cpu", compile_backend="inductor"),
    "cuda": lambda name: TorchDeviceBackend(name, "cuda", compile_backend="inductor"),
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
    """Every name `get_backend` resolves without MODULE:DEVICE."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_entry_points()))


def _factory(name: str) -> Factory | None:
    return _REGISTERED.get(name) or _BUILTIN.get(name) or _entry_point(name)


def _generic(module_name: str, device_type: str, spec: str) -> Backend:
    importlib.import_module(module_name)  # registers the device (and, maybe, its dynamo backend)
    factory = _factory(device_type)
    if factory is not None:
        return factory(spec)
    from torch._dynamo import list_backends

    compile_backend = device_type if device_type in list_backends(exclude_tags=()) else None
    return TorchDeviceBackend(spec, device_type, compile_backend=compile_backend)


_CACHE: dict[str, Backend] = {}


def get_backend(spec: str) -> Backend:
    """Resolve a `--backend` value to an adapter (one per process and spec). Raises ValueError
    with the accepted forms."""
    adapter = _CACHE.get(spec)
    if adapter is None:
        adapter = _CACHE[spec] = _resolve(spec)
    return adapter


def _resolve(spec: str) -> Backend:
    factory = _factory(spec)
    if factory is not None:
        return factory(spec)
    if ":" in spec:
        module_name, _, device_type = spec.partition(":")
        if module_name and device_type:
            return _generic(module_name, device_type, spec)
    raise ValueError(
        f"unknown backend {spec!r}: use {', '.join(backend_names())} or MODULE:DEVICE "
        f"(adapters register in the entry-point group {ENTRY_POINT_GROUP!r})"
    )


def resolved_backend(spec: str) -> Backend | None:
    """The adapter for `spec` if this process already resolved it, else None (never imports a
    backend: the runner stays light and cannot be broken by a device extension)."""
    return _CACHE.get(spec)
