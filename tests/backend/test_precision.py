"""Precision mode: fp32 matmul-class ops see bf16-rounded inputs (default) or exact (opt-in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import backend

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def precision():
    previous = backend.precision()
    yield backend.set_precision
    backend.set_precision(previous)


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(torch.float32)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g), torch.randn(8, generator=g)


def test_default_mode_rounds_matmul_inputs_to_bf16_with_fp32_accumulation(precision):
    precision("bf16")
    a, b, bias = _inputs()
    da, db, dbias = a.to("neuron"), b.to("neuron"), bias.to("neuron")
    mm = (da @ db).cpu()
    assert mm.dtype == torch.float32
    torch.testing.assert_close(mm, _bf16(a) @ _bf16(b), rtol=0, atol=0)
    assert not torch.equal(mm, a @ b)  # rounding is visible
    lin = torch.nn.functional.linear(da, db.t(), dbias).cpu()
    torch.testing.assert_close(lin, torch.addmm(bias, _bf16(a), _bf16(b)), rtol=0, atol=0)
    bmm = (da.unsqueeze(0) @ db.unsqueeze(0)).cpu()
    torch.testing.assert_close(bmm[0], _bf16(a) @ _bf16(b), rtol=0, atol=0)
    conv_in, conv_w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    conv = torch.nn.functional.conv2d(conv_in.to("neuron"), conv_w.to("neuron")).cpu()
    torch.testing.assert_close(
        conv, torch.nn.functional.conv2d(_bf16(conv_in), _bf16(conv_w)), rtol=0, atol=0
    )


def test_non_matmul_ops_and_other_dtypes_are_exact(precision):
    precision("bf16")
    a, b, _ = _inputs()
    assert torch.equal((a.to("neuron") * 3 + 1).exp().cpu(), (a * 3 + 1).exp())
    ah, bh = a.half(), b.half()
    assert torch.equal((ah.to("neuron") @ bh.to("neuron")).cpu(), ah @ bh)


def test_exact_mode_matches_cpu_bit_for_bit(precision):
    precision("exact")
    a, b, bias = _inputs()
    assert torch.equal((a.to("neuron") @ b.to("neuron")).cpu(), a @ b)
    assert torch.equal(
        torch.addmm(bias.to("neuron"), a.to("neuron"), b.to("neuron")).cpu(), torch.addmm(bias, a, b)
    )


def test_bad_precision_is_rejected(precision):
    with pytest.raises(ValueError, match="exact"):
        precision("fp8")


def test_env_var_selects_exact_mode_in_a_new_process():
    code = textwrap.dedent(
        """
        import json, torch, backend
        a = torch.randn(8, 8)
        same = torch.equal((a.to("neuron") @ a.to("neuron")).cpu(), a @ a)
        print(json.dumps({"precision": backend.precision(), "same": same}))
        """
    )
    env = {**os.environ, "NEURON_PRECISION": "exact"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"precision": "exact", "same": True}
