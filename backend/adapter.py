"""The harness adapter of the simulated device (the `neuron` entry of `harness.backends`).

It implements contracts.backends.Backend structurally: this package knows nothing of the harness
and does not import it. Everything the harness needs to know about the device (precision mode,
fallback mode, lowering table, memory) it asks here; the NEURON_* variables are read by the
device's own modules, once each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any


class NeuronBackend:
    device_type = "neuron"
    reports_fallbacks = True
    compile_backend = "neuron"  # torch.compile(backend="neuron"), registered by `import backend`
    # The CPU compile that follows the same pipeline (Dynamo -> AOTAutograd, no inductor): what the
    # harness' cpu reference compiles with when it judges this device's compile failures.
    reference_compile_backend = "aot_eager"
    simulated = True

    def __init__(self, name: str = "neuron") -> None:
        self.name = name

    def activate(self) -> None:
        """Choosing the simulator registers it (importing torch never does: NEURON_AUTOLOAD)."""
        import backend  # registers the device and the compiler

        if backend.stepped_aside:  # another backend owns the device: its own adapter must be used
            raise RuntimeError(f"the simulated neuron device is not registered: {backend.stepped_aside}")

    def device_scope(self) -> contextlib.AbstractContextManager[None]:
        """The device is a dispatch key, not a mode: nothing to enter."""
        return contextlib.nullcontext()

    @property
    def device(self) -> Any:
        import torch

        return torch.device(self.device_type)

    def is_available(self) -> bool:
        from backend import device_module

        return device_module.is_available()

    @contextlib.contextmanager
    def track_fallbacks(self) -> Iterator[list[dict[str, Any]]]:
        from backend.fallback import collect_fallbacks

        out: list[dict[str, Any]] = []
        with collect_fallbacks() as events:
            yield out
        out.extend(asdict(e) for e in events)

    def precision_mode(self) -> str:
        from backend.precision import precision

        return precision()

    def rounded_inputs(self) -> dict[str, tuple[str, ...]]:
        """The matmul class of precision.yaml in mode bf16 (its fp32 inputs are rounded), else none."""
        from backend.precision import matmul_class, precision

        return dict(matmul_class()) if precision() == "bf16" else {}

    def reset_peak_memory(self) -> None:
        from backend import device_module

        device_module.reset_peak_memory_stats()

    def peak_memory(self) -> int | None:
        from backend import device_module

        return int(device_module.max_memory_allocated())

    def synchronize(self) -> None:
        from backend import device_module

        device_module.synchronize()

    def op_fingerprints(self) -> dict[str, Any]:
        """Per-op fingerprints of lowering and kernels (backend/fingerprints.py): the harness runs
        the cases whose ops changed since the baseline first."""
        from backend.fingerprints import op_fingerprints

        return op_fingerprints()

    def describe(self) -> dict[str, Any]:
        from backend.fallback import fallback_mode
        from backend.lowering import current_table
        from backend.memory import memory_capacity
        from backend.precision import precision

        info: dict[str, Any] = {
            "backend": self.name,
            "device": self.device_type,
            "available": self.is_available(),
            "simulated": self.simulated,
            "reports_fallbacks": self.reports_fallbacks,
            "compile_backend": self.compile_backend,
            "reference_compile_backend": self.reference_compile_backend,
        }
        try:
            table = current_table()
            info["lowering_table"] = {
                "version": table.version,
                "source": table.source,
                "native_ops": len(table.ops),
            }
        except Exception as exc:  # noqa: BLE001 - a broken table is reported, not fatal
            info["lowering_table"] = {"error": f"{type(exc).__name__}: {exc}"}
        info.update(
            fallback_mode=fallback_mode(), precision=precision(), memory_capacity_bytes=memory_capacity()
        )
        from backend import faults

        info["planted_faults"] = [f.name for f in faults.active()]  # NEURON_FAULTS: results are not real
        from backend import native

        info["native_fast_path"] = native.status()  # C++ kernels, or the pure-Python path and why
        info["versions"] = _versions(info["lowering_table"])
        info["settings"] = {
            "fallback_mode": info["fallback_mode"],
            "precision": info["precision"],
            "memory_capacity_bytes": info["memory_capacity_bytes"],
            "planted_faults": info["planted_faults"],
        }
        return info


def _versions(table: dict[str, Any]) -> dict[str, str]:
    """What was tested: the simulator's distribution, torch, and the lowering table's version."""
    from importlib import metadata

    import torch

    out = {"torch": torch.__version__}
    try:
        out["neuron-coverage-harness"] = metadata.version("neuron-coverage-harness")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        pass
    if table.get("version"):
        out["lowering_table"] = str(table["version"])
    return out
