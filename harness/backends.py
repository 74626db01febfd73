"""Backend adapters: how the harness talks to a device without knowing which one it is.

`get_backend("neuron" | "cpu" | "cuda" | "MODULE:NAME")` returns an adapter that says what the
backend can report. A stage the backend cannot report (fallbacks on cuda, compile on a device
without a compiler) is `not_attempted`, never `pass`.

`MODULE:NAME` imports MODULE (which must register a PyTorch device called NAME, e.g. a real
torch-neuronx, or `backend:neuron` for the bundled one) and then uses whatever of the optional
hooks the module offers: ``collect_fallbacks()`` (a context manager yielding a list of fallback
events), ``is_simulated`` and a Dynamo backend registered under NAME.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Iterator

import torch


@dataclass
class FallbackTrace:
    """Fallback events seen inside one `track_fallbacks()` block (dicts, picklable)."""

    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(int(e.get("count", 1)) for e in self.events)

    @property
    def ops(self) -> list[str]:
        return sorted({e["op"] for e in self.events})


def _event_dict(event: Any) -> dict[str, Any]:
    if isinstance(event, dict):
        return dict(event)
    if is_dataclass(event):
        return asdict(event)
    return dict(vars(event))


@dataclass
class BackendAdapter:
    name: str  # what the user typed: "neuron", "cpu", "mydev"
    device_type: str  # torch device type
    module: Any = None  # the module that provides hooks (fallback tracking, simulated flag)
    reports_fallbacks: bool = False
    compile_backend: str | None = None  # name for torch.compile(backend=...), None: cannot compile
    simulated: bool | None = None  # None: not a neuron-like device, the question does not apply

    @property
    def device(self) -> torch.device:
        return torch.device(self.device_type)

    @property
    def can_compile(self) -> bool:
        return self.compile_backend is not None

    def is_available(self) -> bool:
        if self.device_type == "cpu":
            return True
        mod = getattr(torch, self.device_type, None)
        return bool(mod is not None and mod.is_available())

    @contextlib.contextmanager
    def track_fallbacks(self) -> Iterator[FallbackTrace]:
        """Collect the CPU-fallback events of one block. Empty when the backend cannot report."""
        trace = FallbackTrace()
        if not self.reports_fallbacks:
            yield trace
            return
        with self.module.collect_fallbacks() as events:
            yield trace
        trace.events.extend(_event_dict(e) for e in events)

    def reset_peak_memory(self) -> None:
        mod = getattr(torch, self.device_type, None)
        if mod is not None and hasattr(mod, "reset_peak_memory_stats"):
            with contextlib.suppress(Exception):
                mod.reset_peak_memory_stats()

    def peak_memory(self) -> int | None:
        mod = getattr(torch, self.device_type, None)
        if mod is not None and hasattr(mod, "max_memory_allocated"):
            with contextlib.suppress(Exception):
                return int(mod.max_memory_allocated())
        return None

    def synchronize(self) -> None:
        mod = getattr(torch, self.device_type, None)
        if mod is not None and hasattr(mod, "synchronize"):
            mod.synchronize()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "device": self.device_type,
            "available": self.is_available(),
            "simulated": self.simulated,
            "reports_fallbacks": self.reports_fallbacks,
            "compile_backend": self.compile_backend,
        }


def _from_module(module_name: str, device_type: str, name: str) -> BackendAdapter:
    module = importlib.import_module(module_name)
    from torch._dynamo import list_backends

    compile_backend = device_type if device_type in list_backends(exclude_tags=()) else None
    return BackendAdapter(
        name=name,
        device_type=device_type,
        module=module,
        reports_fallbacks=callable(getattr(module, "collect_fallbacks", None)),
        compile_backend=compile_backend,
        simulated=getattr(module, "is_simulated", None),
    )


def get_backend(spec: str) -> BackendAdapter:
    """Resolve a `--backend` value to an adapter. Raises ValueError with the accepted forms."""
    if spec == "cpu":
        return BackendAdapter(name="cpu", device_type="cpu", compile_backend="inductor")
    if spec == "cuda":
        return BackendAdapter(name="cuda", device_type="cuda", compile_backend="inductor")
    if spec == "neuron":
        return _from_module("backend", "neuron", "neuron")
    if ":" in spec:
        module_name, _, device_type = spec.partition(":")
        if module_name and device_type:
            return _from_module(module_name, device_type, spec)
    raise ValueError(f"unknown backend {spec!r}: use neuron, cpu, cuda or MODULE:DEVICE")
