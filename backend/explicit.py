"""Explicit `neuron` kernels: allocation, transfers, metadata-only views, resize/set, RNG swaps.

These cannot go through the generic fallback: they create device tensors, move bytes between
host and device, or change a device tensor's metadata without touching data.
"""

from __future__ import annotations

import torch

from backend import fallback, storage
from backend.errors import NeuronUnsupportedError
from backend.kernels import generator, run_op

_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_aten = torch.ops.aten


def _count(name: str) -> None:
    fallback._executed[name] += 1


def _check_layout(layout) -> None:
    if layout is not None and layout is not torch.strided:
        raise NeuronUnsupportedError("sparse tensors", f"cannot allocate a {layout} tensor")


def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _count("aten.empty.memory_format")
    _check_layout(layout)
    dtype = dtype or torch.get_default_dtype()
    stride = None
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        stride = torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format).stride()
    return storage.new_tensor(size, dtype, stride)


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    _count("aten.empty_strided.default")
    _check_layout(layout)
    return storage.new_tensor(size, dtype or torch.get_default_dtype(), stride)


def _host(t: torch.Tensor) -> torch.Tensor:
    if t.is_cpu:
        return t
    if t.layout is not torch.strided:
        raise NeuronUnsupportedError("sparse tensors", "cannot copy a sparse tensor to or from neuron")
    return storage.cpu_view(t)


def copy_from(self, dst, non_blocking=False):
    """Host<->device and device<->device copies (also ``torch.tensor(..., device='neuron')``)."""
    _count("aten._copy_from.default")
    if self.is_nested or dst.is_nested:
        raise NeuronUnsupportedError("NestedTensor")
    _host(dst).copy_(_host(self))
    return dst


def copy_from_and_resize(self, dst):
    _count("aten._copy_from_and_resize.default")
    if dst.shape != self.shape:
        resize_(dst, self.shape)
    _host(dst).copy_(_host(self))
    return dst


def clone(self, memory_format=None):
    """``clone`` in one Python call instead of ``empty_like`` + ``_copy_from`` (same strides: the CPU
    runs the same ``clone`` logic on the payload view); natively lowered for every dtype, like them."""
    _count("aten.clone.default")
    if self.is_nested:
        raise NeuronUnsupportedError("NestedTensor")
    return storage.from_cpu(_host(self).clone(memory_format=memory_format))


_executed = fallback._executed
_view_meta = _aten.view.default._handle.redispatch_boxed
_as_strided_meta = _aten.as_strided.default._handle.redispatch_boxed
_reshape_alias_meta = _aten._reshape_alias.default._handle.redispatch_boxed


# Views are metadata only: the Meta kernels build the alias (same storage, no bounds check).
# They are the most frequent ops of a model step, hence the inlined counting.
def view(self, size):
    _executed["aten.view.default"] = _executed.get("aten.view.default", 0) + 1
    return _view_meta(_META, self, size)


def as_strided(self, size, stride, storage_offset=None):
    _executed["aten.as_strided.default"] = _executed.get("aten.as_strided.default", 0) + 1
    return _as_strided_meta(_META, self, size, stride, storage_offset)


def reshape_alias(self, size, stride):
    _executed["aten._reshape_alias.default"] = _executed.get("aten._reshape_alias.default", 0) + 1
    return _reshape_alias_meta(_META, self, size, stride)


def resize_(self, size, memory_format=None):
    _count("aten.resize_.default")
    stride = storage.contiguous_strides(size)
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        stride = list(
            torch.empty(size, dtype=self.dtype, device="meta", memory_format=memory_format).stride()
        )
    offset = self.storage_offset()
    needed = storage.storage_nbytes(size, stride, offset, self.dtype.itemsize)
    payload = storage.payload_of(self)
    if payload.nbytes() < needed:
        payload.resize_(needed)
        storage.sync_payload_size(self)
    storage.set_layout(self, size, stride, offset)
    return self


def set_default(self):
    """``t.set_()``: point ``t`` at a new empty device storage."""
    _count("aten.set_.default")
    fresh = storage.new_tensor([0], self.dtype)
    storage.set_layout_to(self, fresh.untyped_storage(), [0], [1], 0)
    return self


def set_source_storage(self, source):
    _count("aten.set_.source_Storage")
    return _aten.set_.source_Storage.redispatch(_META, self, source)


def set_source_storage_offset(self, source, storage_offset, size, stride=()):
    _count("aten.set_.source_Storage_storage_offset")
    return _aten.set_.source_Storage_storage_offset.redispatch(
        _META, self, source, storage_offset, size, stride
    )


def set_source_tensor(self, source):
    _count("aten.set_.source_Tensor")
    return _aten.set_.source_Tensor.redispatch(_META, self, source)


def fused_sdp_choice(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False
):
    """SDPA on neuron uses the math decomposition (matmul + softmax, all natively lowered)."""
    _count("aten._fused_sdp_choice.default")
    return 0  # sdp::SDPBackend::math


def with_device_rng(op):
    """Random ops without a generator argument (native_dropout) draw from the device generator."""

    def kernel(*args, **kwargs):
        saved = torch.default_generator.get_state()
        torch.default_generator.set_state(generator.get_state())
        try:
            return run_op(op, args, kwargs)
        finally:
            generator.set_state(torch.default_generator.get_state())
            torch.default_generator.set_state(saved)

    return kernel


def _conv_cpu(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return _aten.convolution.default(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )


def _conv_backward_cpu(
    grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    bias_sizes = [weight.size(1) * groups] if transposed else [weight.size(0)]
    return _aten.convolution_backward.default(
        grad_output,
        input,
        weight,
        bias_sizes,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        output_mask,
    )


def convolution_overrideable(*args, **kwargs):
    """PyTorch routes convolutions of out-of-tree devices here; the CPU computes aten.convolution."""
    return run_op(_aten.convolution_overrideable.default, args, kwargs, compute=_conv_cpu)


def convolution_backward_overrideable(*args, **kwargs):
    return run_op(_aten.convolution_backward_overrideable.default, args, kwargs, compute=_conv_backward_cpu)


def conj_view(self):
    """``conj()`` of a complex tensor: materialized. A lazy conjugate bit on a data-less device
    tensor sends later copies through PyTorch's math-bit fallback, which reads device memory
    directly (a crash); complex dtypes are a CPU fallback on this device anyway."""
    return run_op(_aten._conj.default, (self,), {}, compute=torch.conj_physical)


def neg_view(self):
    """``_neg_view``: materialized for the same reason as :func:`conj_view`."""
    return run_op(_aten._neg_view.default, (self,), {}, compute=torch.neg)


#: explicit kernels the native path implements in C++ (backend/native/csrc/device.cpp); the Python
#: version above is what it calls for the cases it does not handle (other layouts, no payload)
NATIVE_KERNELS = (
    "empty.memory_format",
    "empty_strided",
    "_copy_from",
    "clone",
    "view",
    "as_strided",
    "_reshape_alias",
)

#: schema name -> kernel, registered for the PrivateUse1 key
KERNELS = {
    "empty.memory_format": empty_memory_format,
    "empty_strided": empty_strided,
    "_copy_from": copy_from,
    "_copy_from_and_resize": copy_from_and_resize,
    "clone": clone,
    "view": view,
    "as_strided": as_strided,
    "_reshape_alias": reshape_alias,
    "resize_": resize_,
    "set_": set_default,
    "set_.source_Storage": set_source_storage,
    "set_.source_Storage_storage_offset": set_source_storage_offset,
    "set_.source_Tensor": set_source_tensor,
    "_fused_sdp_choice": fused_sdp_choice,
    "convolution_overrideable": convolution_overrideable,
    "convolution_backward_overrideable": convolution_backward_overrideable,
    "native_dropout": with_device_rng(_aten.native_dropout.default),
    "_conj": conj_view,
    "_neg_view": neg_view,
}
