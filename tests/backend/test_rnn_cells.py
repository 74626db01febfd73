"""PyTorch routes LSTM/GRU cells of PrivateUse1 tensors to the fused `_thnn_fused_*_cell` ops,
which have CUDA kernels only: the device must compute them (found by the catalog: Encodec,
WavTokenizer, SLANeXt failed forward, blamed `backend`). Eager, inference mode and compiled."""

from __future__ import annotations

import copy

import pytest
import torch

import backend


@pytest.fixture
def exact():
    previous = backend.set_precision("exact")
    yield
    backend.set_precision(previous)


def _step(model, x):
    out, _ = model(x)
    out.square().mean().backward()
    return out.detach().cpu(), {n: p.grad.detach().cpu() for n, p in model.named_parameters()}


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_recurrent_layers_train_natively_like_cpu(cls, exact):
    torch.manual_seed(0)
    cpu = cls(8, 16, num_layers=2, batch_first=True, bidirectional=True)
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(3, 5, 8)
    out_cpu, grads_cpu = _step(cpu, x)
    with backend.collect_fallbacks() as events:
        out_dev, grads_dev = _step(dev, x.to("neuron"))
    assert events == [], [(e.op, e.reason) for e in events]
    torch.testing.assert_close(out_dev, out_cpu, rtol=1e-5, atol=1e-6)
    assert grads_dev.keys() == grads_cpu.keys()
    for name in grads_cpu:
        torch.testing.assert_close(grads_dev[name], grads_cpu[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cells_in_inference_mode(cls, exact):
    """Inference mode skips the autograd key: the PrivateUse1 kernel computes the cell too."""
    torch.manual_seed(0)
    cell = cls(8, 16)
    x = torch.randn(3, 8)
    with torch.inference_mode():
        ref = cell(x)
        got = copy.deepcopy(cell).to("neuron")(x.to("neuron"))
    ref, got = (ref, got) if isinstance(ref, tuple) else ((ref,), (got,))
    for r, g in zip(ref, got):
        torch.testing.assert_close(g.cpu(), r, rtol=1e-5, atol=1e-6)


def test_lstm_cell_compiles_on_neuron(exact):
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(8, 16)
    x = torch.randn(3, 8)
    ref = cell(x)[0]
    dev = copy.deepcopy(cell).to("neuron")
    torch._dynamo.reset()
    got = torch.compile(dev, backend="neuron")(x.to("neuron"))[0]
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-5, atol=1e-6)
