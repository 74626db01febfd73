"""The device's backward runs on the calling thread by default, as the CPU's does; the engine's
device thread stays available (NEURON_AUTOGRAD_THREAD=device)."""

from __future__ import annotations

import threading

import pytest
import torch

import backend  # noqa: F401  (registers the device; applies the default in this thread)
from backend import autograd_thread
from backend.errors import SettingsError


@pytest.fixture
def restore_threading():
    previous = torch._C._is_multithreading_enabled()
    yield
    torch.autograd.set_multithreading_enabled(previous)


def _backward_thread() -> int:
    """The id of the thread that runs a neuron tensor's backward."""
    seen: list[int] = []
    x = torch.randn(4, device="neuron", requires_grad=True)
    y = (x * 2).sum()
    y.register_hook(lambda g: seen.append(threading.get_ident()))
    y.backward()
    assert x.grad is not None and torch.equal(x.grad.cpu(), torch.full((4,), 2.0))
    return seen[0]


def test_default_on_a_cpu_only_build_is_the_calling_thread(monkeypatch, restore_threading):
    monkeypatch.delenv("NEURON_AUTOGRAD_THREAD", raising=False)
    monkeypatch.setattr(autograd_thread, "_other_accelerator_built", lambda: "")
    assert autograd_thread.apply() == "caller"
    assert _backward_thread() == threading.get_ident()


def test_device_mode_uses_the_engines_device_thread(restore_threading):
    autograd_thread.apply("device")
    assert _backward_thread() != threading.get_ident()


def test_environment_chooses_and_a_build_with_another_accelerator_keeps_its_threads(monkeypatch):
    monkeypatch.setattr(autograd_thread, "_other_accelerator_built", lambda: "cuda")
    monkeypatch.delenv("NEURON_AUTOGRAD_THREAD", raising=False)
    assert autograd_thread.configured_mode() == "device"
    monkeypatch.setenv("NEURON_AUTOGRAD_THREAD", "caller")
    assert autograd_thread.configured_mode() == "caller"
    monkeypatch.setenv("NEURON_AUTOGRAD_THREAD", "sideways")
    with pytest.raises(
        SettingsError, match="NEURON_AUTOGRAD_THREAD='sideways' is not valid: use caller or device"
    ):
        autograd_thread.configured_mode()
    with pytest.raises(ValueError, match="sideways"):
        autograd_thread.apply("sideways")


def test_a_training_step_is_the_same_on_either_thread(restore_threading):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to("neuron")
    x = torch.randn(5, 8).to("neuron")
    grads = {}
    for mode in ("caller", "device"):
        autograd_thread.apply(mode)
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
        grads[mode] = [p.grad.cpu() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(grads["caller"], grads["device"]))
