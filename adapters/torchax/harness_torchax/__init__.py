"""torchax as a harness backend: the adapter behind `--backend torchax`.

torchax runs PyTorch programs on JAX: its tensors live on the `jax` device (PrivateUse1 renamed)
and every op is executed through a TorchFunctionMode and a TorchDispatchMode that lower it to JAX.
The adapter says where that happens and what torchax cannot report:

- `activate()` imports torchax (harness_torchax.compat adapts it to torch 2.13) and makes its
  environment; the harness calls it once per process when the backend is chosen.
- `device_scope()` enters the environment's modes; the harness enters the scope only around the
  device's part of a stage, so its CPU work (reference, CPU model copy, meta planning, blame
  re-runs) never reaches JAX.
- Declared capabilities: no CPU fallbacks to report (an op without a lowering raises), no
  torch.compile backend, no memory figures: null / not_attempted in every table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib import metadata
from typing import Any

from contracts.backends import BackendDefaults, describe_common

DEVICE = "jax"


class TorchaxBackend(BackendDefaults):
    device_type = DEVICE
    reports_fallbacks = False  # no fallback path: an op torchax cannot lower raises
    compile_backend = None  # torchax.compile is JAX's jit, not a torch.compile backend
    reference_compile_backend = None
    simulated = False  # real computation (XLA on the CPU), not a simulator

    def __init__(self, name: str = "torchax") -> None:
        self.name = name
        self._env: Any = None

    @property
    def device(self) -> Any:
        import torch

        return torch.device(DEVICE)

    def activate(self) -> None:
        if self._env is None:
            from harness_torchax.compat import import_torchax

            self._env = import_torchax().default_env()

    def is_available(self) -> bool:
        return self._env is not None

    @contextlib.contextmanager
    def device_scope(self) -> Iterator[None]:
        """torchax's modes, once: a scope entered inside another changes nothing. MultiheadAttention's
        fast path (sparse kernels torchax cannot lower) is off inside it, as torchax wants, and
        as it was outside."""
        import torch

        if self._env is None:
            raise RuntimeError("torchax backend used before activate()")
        if self._env.enabled:
            yield
            return
        fastpath = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            with self._env:
                yield
        finally:
            torch.backends.mha.set_fastpath_enabled(fastpath)

    def describe(self) -> dict[str, Any]:
        from harness_torchax.compat import RESOLVED

        return describe_common(self) | {
            "versions": _versions(),
            "settings": _settings(self._env) | {"missing_overloads": list(RESOLVED)},
        }


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("harness-torchax", "torchax", "jax", "jaxlib", "torch"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _settings(env: Any) -> dict[str, Any]:
    """What decides torchax's numbers: JAX's platform, 64-bit mode (off: int64 and float64 become
    32-bit), matmul precision, and torchax's own switches."""
    import jax

    out: dict[str, Any] = {
        "jax_platform": jax.default_backend(),
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
    }
    if env is not None:
        for key in (
            "internal_respect_torch_return_dtypes",
            "use_int32_for_index",
            "treat_cuda_as_jax_device",
        ):
            out[key] = getattr(env.config, key, None)
    return out
