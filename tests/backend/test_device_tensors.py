"""Real PrivateUse1 tensors on `neuron`: moves, factories, printing, views and in-place aliasing,
autograd, optimizers and state_dict round trips, all checked against the same work on CPU."""

from __future__ import annotations

import copy
import io

import pytest
import torch

import backend


def test_tensor_is_a_plain_privateuse1_tensor_not_a_subclass():
    x = torch.ones(2, device="neuron")
    assert type(x) is torch.Tensor
    assert x.device == torch.device("neuron:0") and x.is_neuron


def test_to_and_back_roundtrip_keeps_values_dtype_and_shape():
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.float64):
        src = (torch.arange(12).reshape(3, 4) % 5).to(dtype)
        dev = src.to("neuron")
        assert dev.device.type == "neuron" and dev.dtype == dtype and dev.shape == src.shape
        assert torch.equal(dev.cpu(), src)


def test_factories_with_device_argument():
    assert torch.zeros(2, 3, device="neuron").cpu().tolist() == [[0.0] * 3] * 2
    assert torch.ones(4, dtype=torch.int32, device="neuron").sum().item() == 4
    assert torch.full((2,), 7.5, device="neuron").cpu().tolist() == [7.5, 7.5]
    assert torch.arange(5, device="neuron").cpu().tolist() == [0, 1, 2, 3, 4]
    assert torch.eye(3, device="neuron").cpu().trace().item() == 3.0
    assert torch.tensor([[1, 2], [3, 4]], device="neuron").cpu().tolist() == [[1, 2], [3, 4]]
    assert torch.empty(3, 5, device="neuron").shape == (3, 5)
    assert torch.linspace(0, 1, 5, device="neuron").cpu().tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    x = torch.randn(4, 4, device="neuron")
    assert torch.zeros_like(x).device.type == "neuron"


def test_printing_shows_values_and_device():
    x = torch.tensor([1.5, -2.0], device="neuron")
    text = repr(x)
    assert "1.5000" in text and "-2.0000" in text and "device='neuron:0'" in text
    assert "dtype=torch.bfloat16" in repr(x.to(torch.bfloat16))


def test_item_and_cpu():
    x = torch.tensor([3.0, 4.0], device="neuron")
    assert x.norm().item() == pytest.approx(5.0)
    assert isinstance(x.sum().item(), float)
    assert x.cpu().device.type == "cpu"


def test_views_share_storage_and_in_place_writes_alias():
    x = torch.arange(12.0, device="neuron").reshape(3, 4)
    ref = torch.arange(12.0).reshape(3, 4)
    for t in (x, ref):
        t[1].add_(100)  # select view, in place
        t.t()[0, 2] = -1  # transposed view, setitem
        t[:, 1:3].mul_(2)  # strided slice
        t.view(-1)[0] = 42  # flat view
        t.unsqueeze(0).squeeze_(0)  # metadata-only in place on a view
    assert torch.equal(x.cpu(), ref)
    col = x[:, 2]
    assert col.stride() == (4,) and col.storage_offset() == 2
    assert torch.equal(col.cpu(), ref[:, 2])
    assert torch.equal(x.t().contiguous().cpu(), ref.t().contiguous())
    parts = x.split([1, 3], dim=1)
    assert [p.shape for p in parts] == [(3, 1), (3, 3)]
    parts[1].zero_()
    assert x.cpu()[:, 1:].abs().sum().item() == 0


def test_expand_and_out_argument_resized_from_empty():
    a = torch.ones(1, 3, device="neuron").expand(2, 3)
    assert a.stride() == (0, 1) and a.cpu().tolist() == [[1.0] * 3] * 2
    out = torch.empty(0, device="neuron")
    torch.add(torch.ones(2, 2, device="neuron"), 1, out=out)
    assert out.shape == (2, 2) and out.cpu().tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_ops_with_several_outputs_and_cpu_scalars():
    x = torch.tensor([[3.0, 1.0], [0.0, 5.0]], device="neuron")
    values, idx = x.max(dim=1)
    assert values.cpu().tolist() == [3.0, 5.0] and idx.cpu().tolist() == [0, 1]
    assert (x * torch.tensor(2.0)).cpu().tolist() == [[6.0, 2.0], [0.0, 10.0]]


def test_autograd_matches_cpu():
    """In exact precision the device's gradients are the CPU's (bf16 mode rounds matmul inputs, so
    its gradients differ by the rounding, which a fixed tolerance cannot bound for any data)."""
    backend.set_precision("exact")
    try:
        torch.manual_seed(0)
        w_cpu = torch.randn(4, 3, requires_grad=True)
        w_dev = w_cpu.detach().to("neuron").requires_grad_()
        x = torch.randn(5, 4)
        for w, dev in ((w_cpu, "cpu"), (w_dev, "neuron")):
            y = torch.tanh(x.to(dev) @ w).pow(2).sum()
            y.backward()
    finally:
        backend.set_precision("bf16")
    assert w_dev.grad.device.type == "neuron"
    torch.testing.assert_close(w_dev.grad.cpu(), w_cpu.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt_name", ["SGD", "AdamW"])
def test_optimizers_match_cpu(opt_name):
    backend.set_precision("exact")
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
        dev_model = copy.deepcopy(model).to("neuron")
        data = torch.randn(10, 6)
        for m, dev in ((model, "cpu"), (dev_model, "neuron")):
            cls = getattr(torch.optim, opt_name)
            opt = cls(m.parameters(), lr=0.05, **({"momentum": 0.9} if opt_name == "SGD" else {}))
            for _ in range(3):
                opt.zero_grad()
                m(data.to(dev)).pow(2).mean().backward()
                opt.step()
        for p_cpu, p_dev in zip(model.parameters(), dev_model.parameters()):
            assert p_dev.device.type == "neuron"
            torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6)
    finally:
        backend.set_precision("bf16")


def test_module_to_keeps_parameters_and_tied_weights():
    model = torch.nn.Module()
    model.emb = torch.nn.Embedding(10, 4)
    model.head = torch.nn.Linear(4, 10, bias=False)
    model.head.weight = model.emb.weight
    model.to("neuron")
    assert model.head.weight is model.emb.weight
    assert isinstance(model.emb.weight, torch.nn.Parameter) and model.emb.weight.device.type == "neuron"
    assert len(list(model.parameters())) == 1


def test_state_dict_save_and_load_roundtrip(tmp_path):
    model = torch.nn.Linear(4, 3).to("neuron")
    path = tmp_path / "sd.pt"
    torch.save(model.state_dict(), path)
    loaded_cpu = torch.load(path, map_location="cpu")
    loaded_dev = torch.load(path, map_location="neuron")
    loaded_same = torch.load(path)
    for name, value in model.state_dict().items():
        assert loaded_cpu[name].device.type == "cpu"
        assert loaded_dev[name].device.type == "neuron" and loaded_same[name].device.type == "neuron"
        assert torch.equal(loaded_cpu[name], value.cpu())
        assert torch.equal(loaded_dev[name].cpu(), value.cpu())
    fresh = torch.nn.Linear(4, 3).to("neuron")
    fresh.load_state_dict(loaded_cpu)
    assert torch.equal(fresh.weight.detach().cpu(), model.weight.detach().cpu())
    buf = io.BytesIO()
    torch.save(torch.arange(6, device="neuron").view(2, 3).t(), buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf, map_location="cpu"), torch.arange(6).view(2, 3).t())


def test_device_storage_constructor_does_not_crash():
    st = torch.UntypedStorage(16, device="neuron")
    assert st.device.type == "neuron" and st.nbytes() == 16
    st.copy_(torch.arange(16, dtype=torch.uint8).untyped_storage())
    assert torch.equal(torch.empty(0, dtype=torch.uint8).set_(st.cpu()), torch.arange(16, dtype=torch.uint8))


def test_conjugate_and_negative_views_do_not_crash():
    """Lazy conj/neg bits on a data-less tensor would send copies through PyTorch's math-bit
    fallback, which reads device memory directly (a segfault); the device materializes them."""
    x = torch.randn(4, dtype=torch.complex64)
    d = x.to("neuron")
    assert torch.equal(d.conj().clone().cpu(), x.conj().resolve_conj())
    assert torch.equal(d.conj().cpu(), x.conj().resolve_conj())
    r = torch.randn(5, 5)
    torch.testing.assert_close(torch.fft.hfft(r.to("neuron")).cpu(), torch.fft.hfft(r))
    assert torch.equal(torch.view_as_real(d).cpu(), torch.view_as_real(x))


def test_python_scalars_in_tensor_positions():
    """Composite kernels pass wrapped numbers (x * 2.0); they reach Python as plain numbers."""
    x = torch.tensor([-1.5, 2.0, 3.0])
    assert torch.equal(torch.copysign(x.to("neuron"), -2.0).cpu(), torch.copysign(x, -2.0))
    assert torch.equal(
        torch.remainder(torch.arange(5).to("neuron"), 3).cpu(), torch.remainder(torch.arange(5), 3)
    )
