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

from functools import partial as _partial
from weakref import ref as _ref

import torch

from backend import memory

_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset
_set_boxed = _set_storage._handle.redispatch_boxed
_as_strided_boxed = torch.ops.aten.as_strided.default._handle.redispatch_boxed
_create = torch._C._acc.create_empty_tensor
_empty = torch.empty
_EMPTY_SIZE = (0,)  # size of a fresh device tensor before its layout is set

# device storage key -> [payload (CPU UntypedStorage), accounted bytes, weakref to the device
# storage (its callback frees the entry), {layout key: cached CPU view}]
_PAYLOAD, _NBYTES, _REF, _VIEWS = 0, 1, 2, 3
_entries: dict[int, list] = {}
_MAX_VIEWS_PER_STORAGE = 16


def _release(key: int, _dead_ref=None) -> None:
    entry = _entries.pop(key, None)
    if entry is not None and entry[_NBYTES]:
        memory.free(entry[_NBYTES])


def _track(
    dev_storage: torch.UntypedStorage, payload: torch.UntypedStorage, nbytes: int, views: dict
) -> None:
    key = dev_storage._cdata
    # partial (C) instead of a lambda: one Python frame less when the storage dies
    _entries[key] = [payload, nbytes, _ref(dev_storage, _partial(_release, key)), views]


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


def new_tensor(
    size, dtype: torch.dtype, stride=None, payload: torch.UntypedStorage | None = None, offset: int = 0
) -> torch.Tensor:
    """A fresh device tensor; allocates (and accounts) an uninitialized payload when none is given."""
    size = list(size)
    stride = contiguous_strides(size) if stride is None else list(stride)
    if payload is None:
        nbytes = storage_nbytes(size, stride, offset, dtype.itemsize)
        memory.allocate(nbytes)
        try:
            payload = _empty(nbytes, dtype=torch.uint8).untyped_storage()
        except BaseException:
            memory.free(nbytes)
            raise
    else:
        nbytes = payload.nbytes()
        memory.allocate(nbytes)
    t = _create(_EMPTY_SIZE, dtype)
    dev = t.untyped_storage()
    _set_boxed(_META, t, dev, offset, size, stride)
    _track(dev, payload, nbytes, {})
    return t


def from_cpu(r: torch.Tensor) -> torch.Tensor:
    """Adopt a fresh CPU result as the payload of a new device tensor (no copy)."""
    if r._is_zerotensor():  # no bytes behind its sizes (sgn's gradient of a real input): adopt real zeros
        r = torch.zeros(r.shape, dtype=r.dtype)
    payload = r.untyped_storage()
    nbytes = payload.nbytes()
    memory.allocate(nbytes)
    size, stride, offset, dtype = r.size(), r.stride(), r.storage_offset(), r.dtype
    t = _create(_EMPTY_SIZE, dtype)
    dev = t.untyped_storage()
    _set_boxed(_META, t, dev, offset, size, stride)
    # (_track inlined: this runs once per op result)
    # the result is exactly the CPU view of the new tensor: the next op that reads it hits the cache
    key = dev._cdata
    _entries[key] = [payload, nbytes, _ref(dev, _partial(_release, key)), {(dtype, size, stride, offset): r}]
    return t


def _adopt(dev_storage: torch.UntypedStorage, payload: torch.UntypedStorage, nbytes: int) -> None:
    """The native path adopted a CPU result as ``dev_storage``'s payload: account and track it."""
    memory.allocate(nbytes)
    _track(dev_storage, payload, nbytes, {})


def _track_accounted(dev_storage: torch.UntypedStorage, payload: torch.UntypedStorage, nbytes: int) -> None:
    """The native path allocated (and accounted) ``payload`` for ``dev_storage``: track it."""
    _track(dev_storage, payload, nbytes, {})


def alias(base: torch.Tensor, size, stride, offset: int) -> torch.Tensor:
    """A device tensor sharing ``base``'s storage with another layout (no copy, no bounds check)."""
    return _as_strided_boxed(_META, base, list(size), list(stride), offset)


def set_layout(t: torch.Tensor, size, stride, offset: int) -> None:
    """Change a device tensor's metadata in place (after an ``out=`` op resized its CPU view)."""
    _set_boxed(_META, t, t.untyped_storage(), offset, list(size), list(stride))


def set_layout_to(t: torch.Tensor, dev_storage: torch.UntypedStorage, size, stride, offset: int) -> None:
    """Point ``t`` at another device storage with the given layout."""
    _set_boxed(_META, t, dev_storage, offset, list(size), list(stride))


def _missing() -> RuntimeError:
    return RuntimeError(
        "neuron: tensor has no device payload (it was not created by the neuron device, or its "
        "storage was freed)"
    )


def payload_by_key(key: int) -> torch.UntypedStorage | None:
    entry = _entries.get(key)
    return None if entry is None else entry[_PAYLOAD]


def payload_of(t: torch.Tensor) -> torch.UntypedStorage:
    entry = _entries.get(t.untyped_storage()._cdata)
    if entry is None:
        raise _missing()
    return entry[_PAYLOAD]


def cpu_view(t: torch.Tensor, fresh: bool = False) -> torch.Tensor:
    """The CPU tensor that shares ``t``'s payload with ``t``'s layout (writes go to the device).

    Views are cached per storage (parameters are read every step; op results are cached when
    adopted); ``fresh=True`` gives an uncached one for arguments whose metadata an op may change
    (``out=``, in-place views).
    """
    entry = _entries.get(t.untyped_storage()._cdata)
    if entry is None:
        raise _missing()
    size, stride, offset = t.size(), t.stride(), t.storage_offset()
    if fresh:
        return _empty(0, dtype=t.dtype).set_(entry[_PAYLOAD], offset, size, stride)
    lkey = (t.dtype, size, stride, offset)
    views = entry[_VIEWS]
    v = views.get(lkey)
    if v is None:
        v = _empty(0, dtype=t.dtype).set_(entry[_PAYLOAD], offset, size, stride)
        if len(views) < _MAX_VIEWS_PER_STORAGE:
            views[lkey] = v
    return v


def replace_payload(t: torch.Tensor, payload: torch.UntypedStorage) -> None:
    """Point ``t``'s device storage at another payload (a CPU op swapped the storage)."""
    dev = t.untyped_storage()
    key = dev._cdata
    entry = _entries.get(key)
    old = entry[_NBYTES] if entry else 0
    new = payload.nbytes()
    if new > old:
        memory.allocate(new - old)
    elif new < old:
        memory.free(old - new)
    if entry is None:
        _track(dev, payload, new, {})
    else:
        entry[_PAYLOAD], entry[_NBYTES], entry[_VIEWS] = payload, new, {}


def sync_payload_size(t: torch.Tensor) -> None:
    """Re-account a payload whose CPU storage was resized in place (``out=`` of a new size)."""
    entry = _entries.get(t.untyped_storage()._cdata)
    if entry is None:
        return
    payload = entry[_PAYLOAD]
    new, old = payload.nbytes(), entry[_NBYTES]
    if new != old:
        if new > old:
            try:
                memory.allocate(new - old)
            except BaseException:
                payload.resize_(old)
                raise
        else:
            memory.free(old - new)
        entry[_NBYTES] = new
    entry[_VIEWS] = {}
