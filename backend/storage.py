"""Device storage: the CPU payload behind every `neuron` tensor, and its lifetime.

A `neuron` tensor is a real PrivateUse1 tensor whose storage holds no bytes (data_ptr 0, but the
right nbytes). Its data lives in a CPU "payload" storage in a side table keyed by the device
storage's identity (``untyped_storage()._cdata``), so ``detach()``, views and ``nn.Parameter``
(which share the storage) all find it. The device tensor's own sizes/strides/offset are the
single source of truth for layout: a CPU view is the payload seen through them.

Metadata of device tensors is set through a Meta-key redispatch of ``set_``: the Meta kernels
never check storage bounds and never allocate, so the storage stays a `neuron` storage.
A payload is freed (and its bytes returned to the memory accounting) when its device storage
dies.
"""

from __future__ import annotations

import weakref

import torch

from backend import memory

_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset
_set_boxed = _set_storage._handle.redispatch_boxed
_as_strided = torch.ops.aten.as_strided.default
_create = torch._C._acc.create_empty_tensor

#: device storage key -> CPU payload (torch.UntypedStorage)
_payloads: dict[int, torch.UntypedStorage] = {}
#: device storage key -> bytes accounted for it
_accounted: dict[int, int] = {}
#: device storage key -> weakref to the device storage (its callback frees the payload)
_refs: dict[int, weakref.ref] = {}
#: device storage key -> {layout key: CPU view}; views of parameters are reused across steps
_views: dict[int, dict[tuple, torch.Tensor]] = {}
_MAX_VIEWS_PER_STORAGE = 16


def _release(key: int) -> None:
    _payloads.pop(key, None)
    _views.pop(key, None)
    _refs.pop(key, None)
    nbytes = _accounted.pop(key, 0)
    if nbytes:
        memory.free(nbytes)


def _track(dev_storage: torch.UntypedStorage, payload: torch.UntypedStorage) -> None:
    key = dev_storage._cdata
    _payloads[key] = payload
    _accounted[key] = payload.nbytes()
    _refs[key] = weakref.ref(dev_storage, lambda _r, k=key: _release(k))


def storage_nbytes(size, stride, offset: int, itemsize: int) -> int:
    if any(s == 0 for s in size):
        return 0
    span = 1 + sum((s - 1) * st for s, st in zip(size, stride))
    return (span + offset) * itemsize


def contiguous_strides(size) -> list[int]:
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(int(s), 1)
    return strides[::-1]


def new_tensor(size, dtype: torch.dtype, stride=None, payload: torch.UntypedStorage | None = None,
               offset: int = 0) -> torch.Tensor:
    """A fresh device tensor; allocates (and accounts) a zero-filled-or-not payload when none is given."""
    size = list(size)
    stride = contiguous_strides(size) if stride is None else list(stride)
    if payload is None:
        nbytes = storage_nbytes(size, stride, offset, dtype.itemsize)
        memory.allocate(nbytes)
        try:
            payload = torch.UntypedStorage(nbytes)
        except BaseException:
            memory.free(nbytes)
            raise
    else:
        memory.allocate(payload.nbytes())
    t = _create([0], dtype)
    dev = t.untyped_storage()
    _set_storage.redispatch(_META, t, dev, offset, size, stride)
    _track(dev, payload)
    return t


def from_cpu(r: torch.Tensor) -> torch.Tensor:
    """Adopt a fresh CPU result as the payload of a new device tensor (no copy)."""
    payload = r.untyped_storage()
    nbytes = payload.nbytes()
    memory.allocate(nbytes)
    t = _create([0], r.dtype)
    dev = t.untyped_storage()
    _set_boxed(_META, t, dev, r.storage_offset(), r.size(), r.stride())
    key = dev._cdata
    _payloads[key] = payload
    _accounted[key] = nbytes
    _refs[key] = weakref.ref(dev, lambda _r, k=key: _release(k))
    # the result is exactly the CPU view of the new tensor: the next op that reads it hits the cache
    _views[key] = {(r.dtype, r.size(), r.stride(), r.storage_offset()): r}
    return t


def alias(base: torch.Tensor, size, stride, offset: int) -> torch.Tensor:
    """A device tensor sharing ``base``'s storage with another layout (no copy, no bounds check)."""
    return _as_strided.redispatch(_META, base, list(size), list(stride), offset)


def set_layout(t: torch.Tensor, size, stride, offset: int) -> None:
    """Change a device tensor's metadata in place (after an ``out=`` op resized its CPU view)."""
    _set_storage.redispatch(_META, t, t.untyped_storage(), offset, list(size), list(stride))


def payload_of(t: torch.Tensor) -> torch.UntypedStorage:
    key = t.untyped_storage()._cdata
    try:
        return _payloads[key]
    except KeyError:
        raise RuntimeError(
            "neuron: tensor has no device payload (it was not created by the neuron device, or "
            "its storage was freed)"
        ) from None


def cpu_view(t: torch.Tensor, fresh: bool = False) -> torch.Tensor:
    """The CPU tensor that shares ``t``'s payload with ``t``'s layout (writes go to the device).

    Views are cached per storage (parameters are read every step); ``fresh=True`` gives an
    uncached one for arguments whose metadata an op may change (``out=``, in-place views).
    """
    dev = t.untyped_storage()
    key = dev._cdata
    size = t.size()
    lkey = (t.dtype, size, t.stride(), t.storage_offset())
    views = None if fresh else _views.get(key)
    if views is not None:
        v = views.get(lkey)
        if v is not None:
            return v
    try:
        payload = _payloads[key]
    except KeyError:
        raise RuntimeError(
            "neuron: tensor has no device payload (it was not created by the neuron device, or "
            "its storage was freed)"
        ) from None
    v = torch.empty(0, dtype=t.dtype).set_(payload, lkey[3], size, lkey[2])
    if fresh:
        return v
    if views is None:
        _views[key] = {lkey: v}
    elif len(views) < _MAX_VIEWS_PER_STORAGE:
        views[lkey] = v
    return v


def replace_payload(t: torch.Tensor, payload: torch.UntypedStorage) -> None:
    """Point ``t``'s device storage at another payload (a CPU op swapped the storage)."""
    dev = t.untyped_storage()
    key = dev._cdata
    old = _accounted.get(key, 0)
    new = payload.nbytes()
    if new > old:
        memory.allocate(new - old)
    elif new < old:
        memory.free(old - new)
    _payloads[key] = payload
    _accounted[key] = new
    _views.pop(key, None)
    if key not in _refs:
        _refs[key] = weakref.ref(dev, lambda _r, k=key: _release(k))


def sync_payload_size(t: torch.Tensor) -> None:
    """Re-account a payload whose CPU storage was resized in place (``out=`` of a new size)."""
    key = t.untyped_storage()._cdata
    payload = _payloads.get(key)
    if payload is None:
        return
    new, old = payload.nbytes(), _accounted.get(key, 0)
    if new != old:
        if new > old:
            try:
                memory.allocate(new - old)
            except BaseException:
                payload.resize_(old)
                raise
        else:
            memory.free(old - new)
        _accounted[key] = new
    _views.pop(key, None)


def is_device_tensor(t: torch.Tensor) -> bool:
    return t.untyped_storage()._cdata in _payloads


def live_storages() -> int:
    return len(_payloads)


def set_layout_to(t: torch.Tensor, dev_storage: torch.UntypedStorage, size, stride, offset: int) -> None:
    """Point ``t`` at another device storage with the given layout."""
    _set_storage.redispatch(_META, t, dev_storage, offset, list(size), list(stride))
