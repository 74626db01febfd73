"""Keep tied parameters tied when a module moves to `neuron`.

``nn.Module._apply`` can only swap a parameter's data in place when the two tensor types are
"shallow-copy compatible", and PyTorch's list of such dense backends does not include
PrivateUse1. For a PrivateUse1 device it therefore builds a *new* Parameter per module entry,
so a weight shared by two modules (tied input/output embeddings) becomes two independent
weights after ``model.to("neuron")``: training would silently diverge from CPU. This wrapper
restores the sharing after the move; nothing changes for conversions that do not involve
`neuron`.
"""

from __future__ import annotations

import threading

import torch

_state = threading.local()
_original = None


def _retie(before: list) -> None:
    first_new: dict[int, torch.Tensor] = {}
    for mod, name, old, kind in before:
        table = mod._parameters if kind == "p" else mod._buffers
        new = table.get(name)
        if new is None:
            continue
        seen = first_new.get(id(old))
        if seen is None:
            first_new[id(old)] = new
        elif new is not seen and new.device.type == "neuron":
            table[name] = seen


def _apply(self, fn, recurse=True):
    if getattr(_state, "active", False):
        return _original(self, fn, recurse)
    before = []
    for mod in self.modules():
        before.extend((mod, n, p, "p") for n, p in mod._parameters.items() if p is not None)
        before.extend((mod, n, b, "b") for n, b in mod._buffers.items() if b is not None)
    _state.active = True
    try:
        result = _original(self, fn, recurse)
    finally:
        _state.active = False
    _retie(before)
    return result


def install() -> None:
    global _original
    if getattr(torch.nn.Module._apply, "_neuron_ties", False):
        return
    _original = torch.nn.Module._apply
    _apply._neuron_ties = True
    torch.nn.Module._apply = _apply
