"""The numerics gate: allclose, else RMSE relative to eager CPU error, else cosine."""

from __future__ import annotations

import torch

from harness.numerics import compare, compare_outputs, tolerance


def ref(n=1000, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_allclose_passes_float32_rounding():
    r = ref()
    c = compare(r.float(), r)
    assert c.passed and c.method == "allclose"


def test_rmse_gate_accepts_error_no_worse_than_eager():
    r = ref()
    noise = ref(seed=1) * 5e-3
    eager = (r + noise).float()
    device = (r + noise * 1.5).float()  # beyond allclose, but within 2x eager's RMSE
    c = compare(device, r, eager)
    assert c.passed and c.method == "rmse"
    assert c.rmse <= 2 * c.eager_rmse


def test_rmse_gate_rejects_error_much_worse_than_eager_then_cosine_decides():
    r = ref()
    eager = r.float()
    device = (r + ref(seed=2) * 0.5).float()
    c = compare(device, r, eager)
    assert not c.passed and "cosine" in c.reason


def test_cosine_last_resort():
    r = ref()
    device = (r * 1.05).float()  # a scale error: not close, no eager given, but same direction
    c = compare(device, r)
    assert c.passed and c.method == "cosine" and c.cosine > 0.99


def test_shape_and_nonfinite_mismatch_fail():
    r = ref()
    assert not compare(r[:10].float(), r).passed
    bad = r.float().clone()
    bad[0] = float("nan")
    c = compare(bad, r)
    assert not c.passed and c.method == "nonfinite"


def test_dtype_aware_tolerance():
    assert tolerance(torch.bfloat16)[0] > tolerance(torch.float32)[0]
    r = ref()
    assert compare(r.to(torch.bfloat16), r).passed
    assert not compare(r.float() + 5e-3, r).method == "allclose"


def test_compare_outputs_worst_tensor_decides():
    r = ref()
    out_ref = {"logits": r, "hidden": r * 2}
    good = {"logits": r.float(), "hidden": (r * 2).float()}
    bad = {"logits": r.float(), "hidden": (-r * 2).float()}
    assert compare_outputs(good, out_ref).passed
    c = compare_outputs(bad, out_ref)
    assert not c.passed and c.tensors == 2
