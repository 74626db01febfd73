"""One Tolerance type for every check, with the values each use has always had.

The numbers below are pinned on purpose: a change to harness/data/numerics.yaml or
registry/data/tolerances.yaml changes what passes, and must show up here as a deliberate edit.
"""

from __future__ import annotations

import pytest
import torch

from contracts.errors import RuleFileError
from contracts.rulefiles import validate
from contracts.tolerance import EXACT, Tolerance
from harness.stages import compare as gate
from registry import tolerances as replay_tolerances
from registry.tolerances import tolerance_for
from registry.upstream import execute
from registry.upstream.opinfos import ToleranceOverride

#: the numerics gate: class -> (atol, rtol, rmse_multiplier)
GATE = {
    "float32": (1.0e-6, 1.0e-4, 2.0),
    "bfloat16": (1.0e-5, 1.6e-2, 3.0),
    "float16": (1.0e-5, 1.0e-3, 3.0),
    "float64": (1.0e-7, 1.0e-7, 2.0),
    "undeclared_rounding": (1.0e-2, 1.6e-2, 3.0),
}
#: the unit tier's replay: output dtype -> (atol, rtol, atol_rms) in the exact precision mode
REPLAY = {
    "f64": (1.0e-7, 1.0e-7, 1.0e-7),
    "f32": (1.0e-5, 1.3e-6, 1.0e-5),
    "c64": (1.0e-5, 1.3e-6, 1.0e-5),
    "c128": (1.0e-7, 1.0e-7, 1.0e-7),
    "f16": (1.0e-5, 1.0e-3, 1.0e-3),
    "bf16": (1.0e-5, 1.6e-2, 8.0e-3),
    "float8_e4m3fn": (1.0e-2, 1.25e-1, 6.0e-2),
    "float8_e5m2": (1.0e-2, 2.5e-1, 1.2e-1),
}
#: the bf16 precision mode's matmul-class tolerance of f32 / c64 outputs
BF16_MATMUL = (1.0e-5, 1.6e-2, 5.0e-2)


def _triple(t: Tolerance, third: str) -> tuple[float, float, float]:
    return (t.atol, t.rtol, getattr(t, third))


@pytest.mark.parametrize("cls", sorted(GATE))
def test_the_numerics_gate_per_class(cls):
    t = gate.tolerance(cls)
    assert isinstance(t, Tolerance) and t.name == cls
    assert _triple(t, "rmse_multiplier") == GATE[cls]
    assert t.atol_rms == 0.0 and not t.exact  # the gate is allclose, then the RMSE gate


@pytest.mark.parametrize(
    ("dtype", "undeclared", "cls"),
    [
        (torch.float32, False, "float32"),
        (torch.float32, True, "undeclared_rounding"),
        (torch.complex64, False, "float32"),
        (torch.bfloat16, False, "bfloat16"),
        (torch.bfloat16, True, "bfloat16"),
        (torch.float16, True, "float16"),
        (torch.float64, False, "float64"),
    ],
)
def test_tolerance_of_a_tensor_is_its_classes(dtype, undeclared, cls):
    t = gate.tolerance_of(dtype, undeclared_rounding=undeclared)
    assert t.name == cls and _triple(t, "rmse_multiplier") == GATE[cls]


def test_the_gates_small_tensor_settings():
    s = gate.settings()
    assert (s.rmse_multiplier_small, s.small_numel) == (3.0, 10)


@pytest.mark.parametrize("mode", ["exact", "bf16"])
@pytest.mark.parametrize("dtype", sorted(REPLAY))
def test_the_replay_per_dtype_for_an_op_no_mode_loosens(dtype, mode):
    t = tolerance_for("aten.add.Tensor", dtype, mode)
    assert isinstance(t, Tolerance) and not t.exact
    assert _triple(t, "atol_rms") == REPLAY[dtype]


@pytest.mark.parametrize("op", ["aten.mm.default", "aten.addmm.out", "aten.convolution_backward.default"])
@pytest.mark.parametrize("dtype", ["f32", "c64"])
def test_the_bf16_mode_loosens_matmul_class_ops_only(op, dtype):
    assert _triple(tolerance_for(op, dtype, "bf16"), "atol_rms") == BF16_MATMUL
    assert _triple(tolerance_for(op, dtype, "exact"), "atol_rms") == REPLAY[dtype]
    assert _triple(tolerance_for(op, "bf16", "bf16"), "atol_rms") == REPLAY["bf16"]


@pytest.mark.parametrize("dtype", ["i64", "i32", "u8", "b8", "c32", ""])
def test_integers_and_bools_are_exact(dtype):
    assert tolerance_for("aten.add.Tensor", dtype, "bf16") is EXACT


def test_the_upstream_tier_is_the_replays_loosened_by_pytorchs_override():
    f32 = torch.float32
    assert _triple(execute._tolerance(f32, "exact", [], None), "atol_rms") == REPLAY["f32"]
    # an op run inside the sample that the mode loosens loosens the sample's outputs
    assert _triple(execute._tolerance(f32, "bf16", ["aten.mm.default"], None), "atol_rms") == BF16_MATMUL
    # PyTorch's toleranceOverride: never stricter than it, never looser than the table
    loose = execute._tolerance(f32, "exact", ["aten.add.Tensor"], ToleranceOverride(atol=1e-3, rtol=1e-2))
    assert _triple(loose, "atol_rms") == (1e-3, 1e-2, 1.0e-5)
    tight = execute._tolerance(f32, "exact", [], ToleranceOverride(atol=1e-9, rtol=0.0))
    assert _triple(tight, "atol_rms") == REPLAY["f32"]
    assert execute._tolerance(torch.int64, "exact", [], ToleranceOverride(atol=1.0, rtol=1.0)) is EXACT


def test_one_type_for_every_use():
    assert type(gate.tolerance("float32")) is type(tolerance_for("aten.mm.default", "f32")) is Tolerance
    assert replay_tolerances.Tolerance is Tolerance  # the registry names the contract's type, no copy of it


def test_a_tolerance_with_an_unknown_or_negative_field_is_rejected():
    with pytest.raises(RuleFileError, match="unknown key 'atoll'"):
        validate(Tolerance, {"rtol": 1e-4, "atoll": 1e-6}, "t.yaml")
    with pytest.raises(RuleFileError, match="key 'atol'"):
        validate(Tolerance, {"rtol": 1e-4, "atol": -1.0}, "t.yaml")
