"""Artifact stores: where NEFF bytes live between processes and machines.

A store maps a cache key to artifact bytes. `DirectoryStore` is the local disk cache and the
default shared cache (a directory on a network filesystem): sharded ``neff/ab/cd/<key>.neff``,
written to a temp file and renamed so a reader never sees half an artifact, with a file lock per
key so parallel processes compile a graph once. Other backends (an object store) plug in through
`register_store_scheme("s3", factory)` and `NEURON_SHARED_CACHE_DIR=s3://...`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path
from typing import Protocol, runtime_checkable

import filelock

_KEY_RE = re.compile(r"^[0-9a-f]{16,128}$")


def check_key(key: str) -> str:
    """Keys become file names: only hex digests are accepted."""
    if not _KEY_RE.match(key):
        raise ValueError(f"invalid cache key {key!r}: expected a hex digest")
    return key


@runtime_checkable
class ArtifactStore(Protocol):
    """What a cache level needs from its storage."""

    location: str

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...

    def delete(self, key: str) -> None: ...

    def keys(self) -> Iterator[str]: ...

    def total_bytes(self) -> int: ...

    def clear(self) -> int: ...

    def lock(self, key: str) -> ContextManager[object]: ...


class DirectoryStore:
    """Artifacts as files under `root`, sharded by key prefix, with atomic writes and locks."""

    SUFFIX = ".neff"

    def __init__(self, root: str | os.PathLike[str], lock_timeout: float = 600.0) -> None:
        self.root = Path(root)
        self.location = str(self.root)
        self.lock_timeout = lock_timeout

    def path(self, key: str) -> Path:
        check_key(key)
        return self.root / "neff" / key[:2] / key[2:4] / f"{key}{self.SUFFIX}"

    def get(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{key[:12]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(key).unlink()

    def keys(self) -> Iterator[str]:
        base = self.root / "neff"
        if not base.is_dir():
            return
        for p in sorted(base.glob(f"*/*/*{self.SUFFIX}")):
            yield p.name[: -len(self.SUFFIX)]

    def total_bytes(self) -> int:
        base = self.root / "neff"
        return sum(p.stat().st_size for p in base.glob(f"*/*/*{self.SUFFIX}")) if base.is_dir() else 0

    def clear(self) -> int:
        n = sum(1 for _ in self.keys())
        for sub in ("neff", "locks"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        return n

    def lock(self, key: str) -> filelock.FileLock:
        """An inter-process lock for compiling `key` (held while compiling and writing)."""
        check_key(key)
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        return filelock.FileLock(str(locks / f"{key}.lock"), timeout=self.lock_timeout)


#: scheme -> factory(location) for shared stores; "" and "file" are plain directories.
_SCHEMES: dict[str, Callable[[str], ArtifactStore]] = {}


def register_store_scheme(scheme: str, factory: Callable[[str], ArtifactStore]) -> None:
    """Plug in another shared store, e.g. an object store client for ``s3://bucket/prefix``."""
    _SCHEMES[scheme] = factory


def open_store(location: str) -> ArtifactStore:
    """A store for a location: a directory path, ``file://path`` or ``<scheme>://...``."""
    scheme, sep, rest = location.partition("://")
    if not sep:
        return DirectoryStore(location)
    if scheme == "file":
        return DirectoryStore(rest)
    factory = _SCHEMES.get(scheme)
    if factory is None:
        known = ", ".join(["file", *sorted(_SCHEMES)])
        raise ValueError(f"no store registered for {scheme}:// (known: {known})")
    return factory(location)
