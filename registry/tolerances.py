"""Per-dtype tolerances, loosened for the backend's declared precision mode (data/tolerances.yaml).

The precision mode comes from the backend: `precision_mode(adapter)` asks the backend module
(``precision_mode``/``precision`` attribute or function, as the bundled device's
``backend.precision()``), then ``NEURON_PRECISION`` for
the neuron device (default ``bf16``: the device rounds fp32 matmul inputs to bf16), and ``exact``
for every other backend.
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    atol_rms: float = 0.0
    exact: bool = False


EXACT = Tolerance(0.0, 0.0, 0.0, exact=True)


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    data = yaml.safe_load(resources.files("registry").joinpath("data/tolerances.yaml").read_text())
    for name, tol in data["dtypes"].items():
        Tolerance(**tol)  # fail loudly on a malformed entry, naming nothing wrong silently
    return data


def precision_mode(adapter: Any) -> str:
    module = getattr(adapter, "module", None)
    for attr in ("precision_mode", "PRECISION_MODE", "get_precision_mode", "precision"):
        value = getattr(module, attr, None) if module is not None else None
        if inspect.ismodule(value):
            value = getattr(value, attr, None)
        if callable(value):
            value = value()
        if isinstance(value, str) and value:
            return value.lower()
        if value is not None and hasattr(value, "value"):  # an Enum
            return str(value.value).lower()
    if getattr(adapter, "device_type", "") == "neuron":
        return os.environ.get("NEURON_PRECISION", "bf16").lower() or "bf16"
    return "exact"


@functools.lru_cache(maxsize=4096)
def tolerance_for(op: str, dtype: str, mode: str = "exact") -> Tolerance:
    """The tolerance of an output of dtype `dtype` (encoding abbreviation) from `op`."""
    table = _table()
    base = table["dtypes"].get(dtype)
    if base is None:
        return EXACT  # integers, bools: exact
    pm = (table.get("precision_modes") or {}).get(mode) or {}
    if dtype in pm.get("dtypes", []) and any(op.startswith(p) for p in pm.get("ops", [])):
        return Tolerance(**pm["tolerance"])
    return Tolerance(**base)
