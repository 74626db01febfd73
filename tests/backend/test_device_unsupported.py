"""Declared-unsupported features fail with an error naming the feature (never a crash)."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import backend
from backend.errors import NeuronUnsupportedError


def _expect(feature: str, fn):
    with pytest.raises(NeuronUnsupportedError) as info:
        fn()
    assert isinstance(info.value, NotImplementedError)
    assert info.value.feature == feature and feature in str(info.value)
    return info.value


def test_sparse_tensors():
    dense = torch.eye(3, device="neuron")
    coo = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2))
    _expect("sparse tensors", lambda: coo.to("neuron"))
    _expect("sparse tensors", lambda: dense.to_sparse())
    _expect("sparse tensors", lambda: torch.sparse_coo_tensor([[0], [1]], [1.0], (2, 2), device="neuron"))
    _expect("sparse tensors", lambda: torch.empty(2, 2, layout=torch.sparse_coo, device="neuron"))


def test_nested_tensors():
    parts = [torch.ones(2), torch.ones(3)]
    _expect("NestedTensor", lambda: torch.nested.nested_tensor(parts, layout=torch.jagged, device="neuron"))
    _expect("NestedTensor", lambda: torch.nested.nested_tensor(parts, device="neuron"))
    _expect("NestedTensor", lambda: torch.nested.as_nested_tensor(parts, device="neuron"))
    _expect("NestedTensor", lambda: torch.nested.nested_tensor(parts).to("neuron"))


def test_forward_mode_ad():
    x = torch.ones(2, device="neuron")

    def dual():
        with fwAD.dual_level():
            fwAD.make_dual(x, torch.ones(2, device="neuron"))

    _expect("forward-mode AD", dual)
    _expect("forward-mode AD", lambda: torch.func.jvp(torch.sin, (x,), (torch.ones(2, device="neuron"),)))


def test_device_still_works_after_unsupported_errors():
    with pytest.raises(NeuronUnsupportedError):
        torch.eye(2, device="neuron").to_sparse()
    assert (torch.ones(2, device="neuron") + 1).cpu().tolist() == [2.0, 2.0]
    assert backend.is_simulated
