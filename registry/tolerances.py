"""The tolerances of the unit and upstream tiers: per output dtype, loosened for the backend's declared
precision mode (registry/data/tolerances.yaml, the one source of these values).

The record is contracts.tolerance.Tolerance, the type the numerics gate uses too (with its own
values: harness/data/numerics.yaml). The precision mode is the backend adapter's
`precision_mode()` (contracts.backends): the bundled device says ``bf16`` by default (it rounds
fp32 matmul inputs to bf16, as the Neuron compiler's auto-cast), ``exact`` with
NEURON_PRECISION=exact; cpu and cuda say ``exact``.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import Field, model_validator

from contracts.rulefiles import Rules, cached_rules, resource
from contracts.tolerance import EXACT, Tolerance


class PrecisionMode(Rules):
    """What a precision mode loosens: the tolerance of `dtypes` outputs of ops whose name starts
    with one of `ops` (op packet prefixes, so backward and out= variants follow)."""

    dtypes: tuple[str, ...] = ()
    tolerance: Tolerance | None = None
    ops: tuple[str, ...] = ()


class ReplayTolerances(Rules):
    """registry/data/tolerances.yaml."""

    version: int
    dtypes: dict[str, Tolerance]
    precision_modes: dict[str, PrecisionMode] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data: Any) -> Any:
        """Each Tolerance carries the dtype (and mode) it is for."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("dtypes"), dict):
            data["dtypes"] = {
                k: {"name": k, **v} if isinstance(v, dict) else v for k, v in data["dtypes"].items()
            }
        if isinstance(data.get("precision_modes"), dict):
            modes = {}
            for name, mode in data["precision_modes"].items():
                if isinstance(mode, dict) and isinstance(mode.get("tolerance"), dict):
                    mode = {**mode, "tolerance": {"name": f"{name} mode", **mode["tolerance"]}}
                modes[name] = mode
            data["precision_modes"] = modes
        return data


def tolerances() -> ReplayTolerances:
    """The table, read once per process."""
    return cached_rules(ReplayTolerances, str(resource("registry", "data/tolerances.yaml")))


@functools.lru_cache(maxsize=4096)
def tolerance_for(op: str, dtype: str, mode: str = "exact") -> Tolerance:
    """The tolerance of an output of dtype `dtype` (encoding abbreviation) from `op`."""
    table = tolerances()
    base = table.dtypes.get(dtype)
    if base is None:
        return EXACT  # integers, bools: exact
    pm = table.precision_modes.get(mode)
    if pm is not None and pm.tolerance is not None and dtype in pm.dtypes and op.startswith(pm.ops):
        return pm.tolerance
    return base
