"""The numerics reference runs ops as the device computes them (harness.stages.reference)."""

from __future__ import annotations

import torch

from harness.stages.reference import DeviceRounding


def test_scalar_overloads_of_ops_the_device_decomposes_run_under_the_rounding_mode():
    """`remainder(x, 2)` / `bitwise_and(x, 1)` are CompositeExplicitAutograd: their decomposition calls
    the Tensor overload with a wrapped number, which reaches a dispatch mode as a Python number (this
    made Inkling2's numerics reference raise). The mode resolves it as PyTorch does."""
    x = torch.arange(12.0).reshape(3, 4)
    i = torch.arange(12).reshape(3, 4)
    cases = [
        lambda: torch.remainder(x, 2),
        lambda: x % 3,
        lambda: torch.bitwise_and(i, 5),
        lambda: torch.fmod(x, 2.5),
        lambda: torch.remainder(7, x + 1),
    ]
    plain = [f() for f in cases]
    with DeviceRounding({"aten.mm": ["self", "mat2"]}, "PrivateUse1"):
        rounded = [f() for f in cases]
    for a, b in zip(plain, rounded):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_declared_inputs_are_still_rounded():
    a = torch.full((2, 2), 1.0 + 2**-10)
    with DeviceRounding({"aten.mm": ["self", "mat2"]}, "PrivateUse1"):
        got = a @ torch.eye(2)
    assert torch.equal(got, a.to(torch.bfloat16).float()) and not torch.equal(got, a @ torch.eye(2))
