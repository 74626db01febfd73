"""Fused RNN cells on `neuron`: `_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell` as their math.

Why: PyTorch's LSTM/GRU cells take the fused path for CUDA, XPU *and PrivateUse1* tensors
(aten/src/ATen/native/RNN.cpp), and those two ops have CUDA kernels only: with no lowering and no
CPU kernel, a CPU fallback cannot run them, so every `nn.LSTM`/`nn.GRU`/`LSTMCell`/`GRUCell` model
(Encodec, WavTokenizer, SLANeXt...) failed on the device. A device lowers them as their gate math
(the same formulas as PyTorch's `_thnn_differentiable_*_cell_backward`); registered for the
AutogradPrivateUse1 key, the math is made of ordinary differentiable ops, so autograd builds the
backward from those ops (the CUDA-only `_thnn_fused_*_cell_backward` is never needed), eager and
compiled graphs see the elementwise ops the device runs, and planted faults on them apply.
"""

from __future__ import annotations

import torch

#: op schema name -> implementation, registered for AutogradPrivateUse1 by backend.device
KERNELS: dict = {}


def _gates(gates: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return gates if bias is None else gates + bias


def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """(hy, cy, workspace); gates in PyTorch's order input, forget, cell, output. The workspace
    is the activated gates ([batch, 4 * hidden], the CUDA kernel's layout), not differentiable."""
    gates = _gates(input_gates, input_bias) + _gates(hidden_gates, hidden_bias)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    workspace = torch.cat([i, f, g, o], 1).detach()
    return hy, cy, workspace


def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """(hy, workspace); gates in PyTorch's order reset, update (input), new. The workspace is
    [batch, 5 * hidden] (reset, update, new gate, hidden new-gate part, hx), not differentiable."""
    ir, ii, in_ = _gates(input_gates, input_bias).chunk(3, 1)
    hr, hi, hn = _gates(hidden_gates, hidden_bias).chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = (hx - n) * z + n
    workspace = torch.cat([r, z, n, hn, hx], 1).detach()
    return hy, workspace


KERNELS["_thnn_fused_lstm_cell"] = fused_lstm_cell
KERNELS["_thnn_fused_gru_cell"] = fused_gru_cell
