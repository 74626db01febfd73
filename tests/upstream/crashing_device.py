"""The bundled `neuron` device with one kernel that kills the process (for the upstream tier's
crash test): ``--backend tests.upstream.crashing_device:neuron``. aten::deg2rad on the device
aborts, as a native kernel with a memory bug would; everything else is the bundled device."""

from __future__ import annotations

import os

import torch

import backend
from backend import collect_fallbacks, executed_ops, is_simulated, precision  # noqa: F401  (the adapter's hooks)

_lib = torch.library.Library("aten", "IMPL")


def _abort(*args, **kwargs):
    os.abort()


_lib.impl("deg2rad", _abort, "PrivateUse1")
_lib.impl("deg2rad", _abort, "AutogradPrivateUse1")
