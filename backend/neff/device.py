"""Bridge between neuron tensors and the host payloads an executable runs on.

Compiled partitions run on the CPU payloads of their neuron inputs and hand back host results
as neuron tensors. The eager device owns payload storage; this module only calls its public
helpers, and degrades to copies (`.cpu()` / `.to("neuron")`) when they are missing.
"""

from __future__ import annotations

from typing import Any

import torch

DEVICE = "neuron"


def _device_helpers() -> tuple[Any, Any] | None:
    try:
        import backend.payload as payload  # type: ignore[import-not-found]
    except Exception:
        return None
    get = getattr(payload, "get_payload", None) or getattr(payload, "payload_of", None)
    wrap = getattr(payload, "wrap_payload", None) or getattr(payload, "from_payload", None)
    return (get, wrap) if callable(get) and callable(wrap) else None


def to_host(t: Any) -> Any:
    """The host tensor holding a neuron tensor's data (no copy when the device exposes it)."""
    if not isinstance(t, torch.Tensor) or t.device.type != DEVICE:
        return t
    helpers = _device_helpers()
    return helpers[0](t) if helpers else t.cpu()


def to_device(t: Any) -> Any:
    """A neuron tensor for a host result (wrapping it without a copy when possible)."""
    if not isinstance(t, torch.Tensor):
        return t
    helpers = _device_helpers()
    return helpers[1](t) if helpers else t.to(DEVICE)
