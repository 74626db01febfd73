"""The simulated `neuron` device: a pure-Python PrivateUse1 backend imitating AWS Trainium.

``import backend`` (idempotent) registers the device; so does choosing it (``--backend neuron``,
``contracts.backends.get_backend("neuron")``). ``import torch`` alone never does: installing the
harness does not change PyTorch for another backend. ``NEURON_AUTOLOAD=1`` opts in to the device
at every ``import torch`` (the ``torch.backends`` entry point ``neuron_autoload``)::

    import torch, backend
    x = torch.randn(4, 4, device="neuron")
    with backend.collect_fallbacks() as events:
        torch.nonzero(x > 0)
    events[0].op, events[0].reason   # ('aten.nonzero.default', 'data-dependent-shape')

Modules: ``device`` (registration), ``device_module`` (``torch.neuron``), ``storage`` (payloads),
``memory`` (accounting), ``kernels``/``explicit`` (execution), ``lowering`` (+ the data file
``lowering_table.yaml``), ``fallback`` (events and mode), ``precision``, ``errors``, ``faults``
(planted faults for measuring what a harness catches; ``NEURON_FAULTS``, ``faults/suite.yaml``).
"""

from __future__ import annotations


def _foreign_owner() -> str:
    """Who else holds PrivateUse1 or the device name in this process ("" when nobody does)."""

    if getattr(torch, "_neuron_backend_registered", False):  # it is us
        return ""
    name = torch._C._get_privateuse1_backend_name()
    if name != "privateuseone":
        return f"PrivateUse1 is already registered as {name!r} by another backend"
    module = getattr(torch, "neuron", None)
    if module is not None:
        return f"torch.neuron is already provided by {getattr(module, '__name__', type(module).__name__)!r}"
    return ""


# With NEURON_AUTOLOAD=1 this package is imported from inside `import torch` (its torch.backends
# entry point): torch is then half-initialized, which the imports below tolerate.

import torch  # noqa: E402

from backend import lowering  # noqa: E402
from backend.device import register as _register  # noqa: E402
from backend.errors import (  # noqa: E402
    FaultFileError,
    LoweringTableError,
    NeuronError,
    NeuronFallbackError,
    NeuronFallbackWarning,
    NeuronFaultError,
    NeuronOutOfMemoryError,
    NeuronUnsupportedError,
)
from backend.fallback import (  # noqa: E402
    FallbackEvent,
    clear_op_tracking,
    collect_fallbacks,
    executed_ops,
    fallback_events,
    fallback_mode,
    fallback_ops,
    record_fallback,
    set_fallback_mode,
)
from backend.memory import memory_capacity, set_memory_capacity  # noqa: E402
from backend.precision import precision, set_precision  # noqa: E402

#: this package simulates the device on the CPU (a real torch-neuronx would say False)
is_simulated = True
DEVICE = "neuron"

#: why the simulator did not register ("" when it did): another backend owns PrivateUse1 / the name
stepped_aside = _foreign_owner()


def _register_compiler() -> None:
    """`torch.compile(backend="neuron")` without installing: the entry point covers installs."""
    from importlib.metadata import entry_points

    if not any(ep.name == DEVICE for ep in entry_points(group="torch_dynamo_backends")):
        from backend.compile import register_dynamo_backend

        register_dynamo_backend()


from backend import adaptive as _adaptive  # noqa: E402
from backend import autograd_thread as _autograd_thread  # noqa: E402
from backend import faults  # noqa: E402  (planted faults: backend.faults.plant/load/clear)

if stepped_aside:
    import warnings

    warnings.warn(
        f"the simulated neuron device steps aside: {stepped_aside}; that backend keeps PrivateUse1 "
        "(use its adapter with --backend, and the simulator in a process without it)",
        stacklevel=2,
    )
else:
    _register()
    _register_compiler()
    faults.load_from_env()  # NEURON_FAULTS=path; a malformed file raises FaultFileError naming the entry
    _adaptive.enable_from_env()  # NEURON_ADAPTIVE_EAGER, opt-in; the rule is there
    _autograd_thread.apply()  # backward on the calling thread (NEURON_AUTOGRAD_THREAD)

__all__ = [
    "DEVICE",
    "FallbackEvent",
    "FaultFileError",
    "LoweringTableError",
    "NeuronError",
    "NeuronFallbackError",
    "NeuronFallbackWarning",
    "NeuronFaultError",
    "NeuronOutOfMemoryError",
    "NeuronUnsupportedError",
    "clear_op_tracking",
    "collect_fallbacks",
    "executed_ops",
    "fallback_events",
    "fallback_mode",
    "fallback_ops",
    "faults",
    "is_simulated",
    "lowering",
    "memory_capacity",
    "precision",
    "record_fallback",
    "set_fallback_mode",
    "set_memory_capacity",
    "set_precision",
    "stepped_aside",
]
