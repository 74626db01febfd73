"""Small adaptations of PyTorch Python code paths to a storage-less Python device.

- ``UntypedStorage.data_ptr()`` raises for a storage with bytes but no data pointer (PyTorch's
  "invalid python storage" check), which breaks ``torch.save``; for `neuron` storages it returns
  0, the value PyTorch uses for "not allocated on the host" (as for meta storages).
- NestedTensor factories with ``device="neuron"`` raise at once (strided ones are built in C++
  without dispatching to the device).
- Jagged NestedTensors are a Python subclass whose components would silently land on the device;
  the device declares NestedTensor unsupported, so building one with `neuron` components raises.
"""

from __future__ import annotations

import torch

from backend.errors import NeuronUnsupportedError

_NAME = "neuron"


def _install_data_ptr() -> None:
    original = torch.UntypedStorage.data_ptr
    if getattr(original, "_neuron", False):
        return

    def data_ptr(self):
        if self.device.type == _NAME:
            return 0
        return original(self)

    data_ptr._neuron = True
    data_ptr.__doc__ = original.__doc__
    torch.UntypedStorage.data_ptr = data_ptr


def _install_storage_cpu() -> None:
    """``UntypedStorage.cpu()`` of a `neuron` storage copies its payload (used by torch.save)."""
    original = torch.UntypedStorage.cpu
    if getattr(original, "_neuron", False):
        return

    def cpu(self):
        if self.device.type == _NAME:
            from backend import storage

            payload = storage.payload_by_key(self._cdata)
            if payload is None:
                raise RuntimeError("neuron: storage has no device payload")
            flat = torch.empty(0, dtype=torch.uint8).set_(payload)
            return flat[: self.nbytes()].clone().untyped_storage()
        return original(self)

    cpu._neuron = True
    torch.UntypedStorage.cpu = cpu


def _bytes_view(st: torch.UntypedStorage) -> torch.Tensor:
    dev = "cpu" if st.device.type == "cpu" else st.device
    return torch.empty(0, dtype=torch.uint8, device=dev).set_(st)


def _install_storage_new_and_copy() -> None:
    """``torch.UntypedStorage(n, device="neuron")`` (torch.load's map_location path) would reach
    the missing PrivateUse1 allocator and crash; build it from a device tensor instead. Storage
    ``copy_`` to/from `neuron` goes through tensor copies (the C++ one rejects data-less storages)."""
    cls = torch.UntypedStorage
    if getattr(cls.__dict__.get("__new__"), "_neuron", False):
        return
    base_new = torch._C.StorageBase.__new__
    base_copy = cls.copy_

    def __new__(klass, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == _NAME:
            if kwargs or len(args) > 1:
                raise TypeError("neuron storages take only a size")
            size = args[0] if args else 0
            if not isinstance(size, int):
                data = (
                    _bytes_view(base_new(klass, size)) if not isinstance(size, torch.UntypedStorage) else None
                )
                size = len(size) if data is None else data.numel()
            return torch.empty(size, dtype=torch.uint8, device=device).untyped_storage()
        if device is None:
            return base_new(klass, *args, **kwargs)
        return base_new(klass, *args, device=device, **kwargs)

    def copy_(self, source, non_blocking=None):
        if self.device.type == _NAME or source.device.type == _NAME:
            if self.nbytes() != source.nbytes():
                raise RuntimeError(
                    f"size does not match, self was {self.nbytes()} bytes but src was {source.nbytes()} bytes"
                )
            _bytes_view(self).copy_(_bytes_view(source))
            return self
        return base_copy(self, source, non_blocking) if non_blocking is not None else base_copy(self, source)

    __new__._neuron = True
    cls.__new__ = staticmethod(__new__)
    cls.copy_ = copy_


def _install_jagged_guard() -> None:
    try:
        from torch.nested._internal.nested_tensor import NestedTensor
    except ImportError:  # pragma: no cover - layout of torch internals changed
        return
    original = NestedTensor.__new__
    if getattr(original, "_neuron", False):
        return

    def __new__(cls, values, offsets, *args, **kwargs):
        if isinstance(values, torch.Tensor) and values.device.type == _NAME:
            raise NeuronUnsupportedError("NestedTensor", "jagged nested tensors cannot live on neuron")
        return original(cls, values, offsets, *args, **kwargs)

    __new__._neuron = True
    NestedTensor.__new__ = staticmethod(__new__)


def _install_nested_factories() -> None:
    """Strided NestedTensors are assembled in C++ without dispatching to the device, so the
    device's NestedTensor kernels only see them at their first op; the public factories with
    ``device="neuron"`` raise right away instead."""
    import torch.nested as nested

    def guard(fn):
        if getattr(fn, "_neuron", False):
            return fn

        def wrapper(*args, **kwargs):
            dev = kwargs.get("device")
            if dev is not None and torch.device(dev).type == _NAME:
                raise NeuronUnsupportedError("NestedTensor", f"torch.nested.{fn.__name__}(device='neuron')")
            return fn(*args, **kwargs)

        wrapper._neuron = True
        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        wrapper.__wrapped__ = fn
        return wrapper

    for name in ("nested_tensor", "as_nested_tensor"):
        if hasattr(nested, name):
            setattr(nested, name, guard(getattr(nested, name)))


def install() -> None:
    _install_data_ptr()
    _install_storage_cpu()
    _install_storage_new_and_copy()
    _install_jagged_guard()
    _install_nested_factories()
