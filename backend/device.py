"""Registration of the `neuron` device with PyTorch (once per process, idempotent).

PrivateUse1 is renamed to ``neuron`` through ``_setup_privateuseone_for_python_backend`` (device
module, generated tensor/module methods, hooks, device guard); kernels are registered with
``torch.library``. The Library objects are kept alive for the whole process: when one is garbage
collected its registrations silently disappear.
"""

from __future__ import annotations

import sys

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from backend import compat, device_module, explicit, kernels, rnn_cells, ties
from backend.errors import NeuronUnsupportedError

NAME = "neuron"
#: every torch.library.Library we create; never released
_LIBRARIES: list = []


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


_PRIVATEUSE1 = torch._C._autograd.DeviceType.PrivateUse1


class _Guard(torch._C._acc.DeviceGuard):
    # called by the C++ device guard of nearly every op: a constant, no attribute chain
    def type_(self):
        return _PRIVATEUSE1


def _unsupported(feature: str, kind: str):
    def kernel(op, *args, **kwargs):
        raise NeuronUnsupportedError(feature, f"{op} was called with a {kind} tensor on neuron")

    return kernel


def _forward_ad_unsupported(*args, **kwargs):
    raise NeuronUnsupportedError(
        "forward-mode AD", "torch.autograd.forward_ad / torch.func.jvp cannot make dual tensors on neuron"
    )


#: CompositeExplicitAutograd-only ops the device lowers as one op (the lowering table lists them):
#: without a kernel they would reach the device decomposed (embedding as index_select), so eager
#: execution, compiled graphs and planted faults would not see the op a model calls.
_DEVICE_LEVEL_OPS = ("embedding",)


def _direct_ops(skip: set[str]):
    """Ops that get a direct kernel instead of reaching the boxed fallback:

    - structured ops: without it they arrive as ``empty`` + the ``.out`` overload (two Python
      calls); a direct kernel makes it one;
    - ops with both a CPU kernel and a CompositeExplicitAutograd decomposition for other devices
      (``native_layer_norm``, ``native_group_norm``, ``addr``, ...): the device runs the op itself,
      as a native lowering would, instead of a decomposition that differs numerically from CPU;
    - ``_DEVICE_LEVEL_OPS``.

    Not the in-place view ops (``as_strided_``): they only change a tensor's sizes and strides,
    which PyTorch's own kernel does for any device, also on a tensor without a payload (AOTAutograd's
    FunctionalTensor wrappers, whose metadata functionalization mutates under ``no_dispatch``).
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::"):
            continue
        if not (
            has(full, "CompositeExplicitAutogradNonFunctional")
            or (has(full, "CompositeExplicitAutograd") and has(full, "CPU"))
            or full.removeprefix("aten::") in _DEVICE_LEVEL_OPS
        ):
            continue
        name = full.removeprefix("aten::")
        if name in skip or has(full, "PrivateUse1"):
            continue
        packet, _, overload = name.partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        except AttributeError:  # pragma: no cover - op without a Python binding
            continue
        if torch.Tag.inplace_view in op.tags:
            continue
        yield name, op


def _install_native() -> bool:
    """Register the C++ kernels of backend.native when it is available (see its docstring): the
    boxed fallback, the direct ops and the hot explicit kernels. False: use the Python kernels."""
    from backend import memory, native, storage

    mod = native.load()
    if mod is None:
        return False
    hooks = {
        "entries": storage._entries,
        "adopt": storage._adopt,
        "track": storage._track_accounted,
        "allocate": memory.allocate,
        "free": memory.free,
        "run": kernels._run,
        "decide": kernels._native_decision,
        "sync_written": kernels._sync_written,
        "check_result": kernels._check_result,
    }
    direct = [name for name, _op in _direct_ops(set(explicit.KERNELS))]
    python_versions = {name: explicit.KERNELS[name] for name in explicit.NATIVE_KERNELS}
    try:
        mod.install_device(hooks, direct, python_versions)
    except Exception as exc:  # noqa: BLE001 - a build that loads but does not fit this torch
        native.unavailable(f"installing its kernels failed: {type(exc).__name__}: {exc}")
        return False
    return True


def is_registered() -> bool:
    return getattr(torch, "_neuron_backend_registered", False)


def register() -> None:
    """Register the device and its kernels. Safe to call again; a foreign PrivateUse1 raises."""
    if is_registered():
        return
    current = torch._C._get_privateuse1_backend_name()
    if current != "privateuseone" or getattr(torch, NAME, None) is not None:  # not registered by us
        owner = f"{current!r}" if current != "privateuseone" else f"module {getattr(torch, NAME).__name__!r}"
        raise RuntimeError(
            f"cannot register the simulated neuron device: PrivateUse1 / torch.{NAME} is already taken by "
            f"{owner} in this process (another backend, e.g. a real torch-neuronx, is installed)"
        )
    _setup_privateuseone_for_python_backend(
        NAME, backend_module=device_module, hook=_Hooks(), device_guard=_Guard()
    )
    sys.modules.setdefault(f"torch.{NAME}", device_module)

    impl = torch.library.Library("aten", "IMPL")
    fb = torch.library.Library("_", "IMPL")
    if not _install_native():
        for name, fn in explicit.KERNELS.items():
            impl.impl(name, fn, "PrivateUse1")
        for name, op in _direct_ops(set(explicit.KERNELS)):
            impl.impl(name, kernels.direct_kernel(op), "PrivateUse1")
        fb.fallback(kernels.boxed_fallback, "PrivateUse1")
    else:
        for name, fn in explicit.KERNELS.items():
            if name not in explicit.NATIVE_KERNELS:
                impl.impl(name, fn, "PrivateUse1")
    for name, fn in rnn_cells.KERNELS.items():  # also below autograd (inference mode skips it)
        impl.impl(name, fn, "AutogradPrivateUse1")
        impl.impl(name, fn, "PrivateUse1")
    impl.impl("_make_dual", _forward_ad_unsupported, "AutogradPrivateUse1")
    impl.impl("_make_dual", _forward_ad_unsupported, "PrivateUse1")
    fb.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    fb.fallback(_unsupported("sparse tensors", "sparse"), "SparsePrivateUse1")
    fb.fallback(_unsupported("sparse tensors", "sparse compressed"), "SparseCsrPrivateUse1")
    fb.fallback(_unsupported("NestedTensor", "nested"), "NestedTensorPrivateUse1")
    _LIBRARIES.extend([impl, fb])
    ties.install()
    compat.install()
    torch._neuron_backend_registered = True
    torch._neuron_backend_libraries = _LIBRARIES
