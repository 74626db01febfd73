"""Opt-in: the simulated `neuron` device at every `import torch` (``NEURON_AUTOLOAD=1``).

PyTorch imports every ``torch.backends`` entry point on `import torch`; this one is a module of its
own, outside the `backend` package, so that loading it imports nothing: unless NEURON_AUTOLOAD is
set the simulator is not registered and PrivateUse1 stays free for another backend (a real
torch-neuronx, torchax). The harness registers the simulator when it is chosen (``--backend
neuron``); user code does with ``import backend``. This is the one NEURON_* variable read outside
the package: it decides whether the package is imported at all.
"""

from __future__ import annotations

import os

ENV_VAR = "NEURON_AUTOLOAD"
_ON = {"1", "true", "yes", "on"}


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "").strip().lower() in _ON


def load() -> None:
    """The torch.backends entry point: must never break `import torch` for the whole venv."""
    if not enabled():
        return
    try:
        import backend  # noqa: F401 - registers the device, or steps aside with a warning
    except Exception as exc:  # noqa: BLE001
        import warnings

        warnings.warn(f"neuron backend failed to load: {type(exc).__name__}: {exc}", stacklevel=2)
