"""The bundled `neuron` device with one kernel that kills the process (for the upstream tier's
crash test): ``--backend tests.registry.upstream.crashing_device:neuron`` (the module registers
the kernel, the adapter is the bundled device's). aten::deg2rad on the device aborts, as a native
kernel with a memory bug would; everything else is the bundled device."""

from __future__ import annotations

import os

import torch

import backend  # noqa: F401  (registers the neuron device)

_lib = torch.library.Library("aten", "IMPL")


def _abort(*args, **kwargs):
    os.abort()


_lib.impl("deg2rad", _abort, "PrivateUse1")
_lib.impl("deg2rad", _abort, "AutogradPrivateUse1")
