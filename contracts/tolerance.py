"""How far a device's value may be from the reference's: the one tolerance record of every check.

One type, three uses, one source of values each:

* the numerics gate of the model tiers (numerics and compile stages), per tolerance class
  (float32, bfloat16, float16, float64, undeclared_rounding): harness/data/numerics.yaml, looked
  up by `harness.stages.compare.tolerance_of(dtype)` (or `.tolerance(class)`);
* the unit tier (registry.replay), per output dtype, loosened by the backend's precision mode for
  matmul-class ops: registry/data/tolerances.yaml, `registry.tolerances.tolerance_for(op, dtype, mode)`;
* the upstream tier (registry.upstream.execute): the unit tier's, never stricter than PyTorch's
  own toleranceOverride for the op (`Tolerance.loosened`).

Why one type: a tolerance crosses packages (the gate's class names travel in result metrics and in
the root-cause record), and two records of the same name with different fields let a value be read
with the wrong meaning. Why two sources: a model's tensors are judged against a float64 truth with
the CPU's own float32 error as a yardstick (the RMSE gate), an op call's outputs against the CPU's
outputs of the same dtype; the thresholds differ for reasons each file states.

Elementwise, a value passes when

    |actual - expected| <= atol + atol_rms * rms(expected) + rtol * |expected|

(`atol_rms` 0: exactly torch.allclose). `rmse_multiplier` is the numerics gate's fallback when
allclose fails: the device's RMSE against the float64 truth may be that many times the CPU float32
eager run's. `exact`: integers and booleans, compared bit for bit.
"""

from __future__ import annotations

from pydantic import Field

from contracts.rulefiles import Rules


class Tolerance(Rules):
    """One tolerance (see the module docstring for the formula and where values come from)."""

    rtol: float = Field(ge=0)
    atol: float = Field(ge=0)
    atol_rms: float = Field(default=0.0, ge=0)  # scales atol to the expected output's magnitude
    rmse_multiplier: float = Field(default=0.0, ge=0)  # the numerics gate's RMSE allowance (0: none)
    exact: bool = False
    name: str = ""  # the class or dtype it is for ("float32", "f32"): metrics and reasons name it

    def loosened(self, rtol: float, atol: float) -> Tolerance:
        """Never stricter than (rtol, atol): PyTorch's own override for an op it knows is imprecise."""
        return self.model_copy(update={"rtol": max(self.rtol, rtol), "atol": max(self.atol, atol)})


#: integers and booleans: equal or not
EXACT = Tolerance(rtol=0.0, atol=0.0, exact=True, name="exact")
