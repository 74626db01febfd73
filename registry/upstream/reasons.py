"""Skip reasons of the upstream tier (temporary home until contracts.status lands)."""

from __future__ import annotations

try:
    from contracts.status import UpstreamSkip  # noqa: F401
except ImportError:  # pragma: no cover - before the contracts package exists
    import enum

    class UpstreamSkip(str, enum.Enum):
        PYTORCH_APPLICABILITY = "pytorch-applicability"
        BACKEND_UNSUPPORTED = "backend-unsupported"
        NO_NATIVE_LOWERING = "no-native-lowering"
        REFERENCE_ERROR = "reference-error"
