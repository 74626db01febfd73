"""Per-dtype tolerances, loosened for the backend's declared precision mode (data/tolerances.yaml).

The precision mode is the backend adapter's `precision_mode()` (contracts.backends): the bundled
device says ``bf16`` by default (it rounds fp32 matmul inputs to bf16, as the Neuron compiler's
auto-cast), ``exact`` with NEURON_PRECISION=exact; cpu and cuda say ``exact``.
"""

from __future__ import annotations

import functools
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
