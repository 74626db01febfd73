"""The NEFF compile cache: memory LRU -> local disk -> shared store -> compile.

    cache = get_cache()                      # per process, follows NEURON_CACHE_DIR & co. (backend.settings)
    exe = cache.get_or_compile(key, lambda: compile_partition(...))
    cache.counters.compiles, cache.stats()

Levels are checked in order; a hit on a lower level fills the ones above. A compile runs under
the key's file lock in the local disk store and re-checks the disk first, so processes racing on
one graph compile it once; threads of one process wait on the compile already in flight. Every
artifact read from disk or the shared store is verified (size + sha256) before it is loaded: a
corrupt one is deleted, counted, and recompiled, never run.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from backend.cache.config import CacheConfig
from backend.cache.counters import Counters, PersistentCounters
from backend.cache.memory import MemoryLRU
from backend.cache.store import ArtifactStore, DirectoryStore, open_store, register_store_scheme
from backend.errors import CorruptArtifactError
from backend.neff import Artifact, Executable, load_executable

__all__ = [
    "ArtifactStore",
    "CacheConfig",
    "Counters",
    "DirectoryStore",
    "NeffCache",
    "get_cache",
    "register_store_scheme",
]


class NeffCache:
    def __init__(self, config: CacheConfig, counters: Counters | None = None) -> None:
        self.config = config
        self.memory: MemoryLRU[Executable] = MemoryLRU(config.max_entries, config.max_bytes)
        self.disk = DirectoryStore(config.disk_dir)
        self.shared: ArtifactStore | None = open_store(config.shared) if config.shared else None
        self.counters = counters if counters is not None else Counters()
        self.persistent = PersistentCounters(config.disk_dir)
        self._lock = threading.Lock()
        self._counter_lock = threading.Lock()
        self._inflight: dict[str, Future[Executable]] = {}

    # ------------------------------------------------------------------ lookup
    def get_or_compile(self, key: str, compile_fn: Callable[[], Artifact]) -> Executable:
        """The executable for `key`, from the first level that has it, compiling at most once."""
        with self._lock:
            exe = self.memory.get(key)
            fut = self._inflight.get(key) if exe is None else None
            owner = exe is None and fut is None
            if owner:
                fut = self._inflight[key] = Future()
        if exe is not None:
            self._count(hits_memory=1)
            return exe
        assert fut is not None
        if not owner:
            self._count(inflight_waits=1)
            return fut.result()
        try:
            exe, size = self._load_or_compile(key, compile_fn)
            self.memory.put(key, exe, size)
            fut.set_result(exe)
            return exe
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters re-raise it, no "never retrieved" noise
            raise
        finally:
            with self._lock:
                self._inflight.pop(key, None)

    def lookup(self, key: str) -> Executable | None:
        """A cached executable without compiling (memory, disk, shared), or None."""
        exe = self.memory.get(key)
        if exe is not None:
            self._count(hits_memory=1)
            return exe
        found = self._from_disk(key) or self._from_shared(key)
        if found is None:
            return None
        self.memory.put(key, found[0], found[1])
        return found[0]

    def _load_or_compile(self, key: str, compile_fn: Callable[[], Artifact]) -> tuple[Executable, int]:
        found = self._from_disk(key) or self._from_shared(key)
        if found is not None:
            return found
        with self.disk.lock(key):
            found = self._from_disk(key)  # another process may have compiled it meanwhile
            if found is not None:
                return found
            try:
                artifact = compile_fn()
            except Exception:
                self._count(compile_failures=1)
                raise
            data = artifact.to_bytes()
            self.disk.put(key, data)
            self._count(compiles=1, compile_seconds=artifact.compile_seconds, bytes_written=len(data))
        if self.shared is not None:
            try:  # the shared level is best effort: a full or unreachable share never fails a compile
                self.shared.put(key, data)
                self._count(bytes_written=len(data))
            except OSError as exc:
                warnings.warn(
                    f"neuron cache: could not publish {key[:12]} to {self.shared.location}: {exc}",
                    stacklevel=2,
                )
        return load_executable(artifact), len(data)

    def _verified(self, store: ArtifactStore, key: str) -> tuple[Executable, int, bytes] | None:
        data = store.get(key)
        if data is None:
            return None
        try:
            exe = load_executable(Artifact.from_bytes(data, expected_key=key))
        except CorruptArtifactError:
            store.delete(key)
            self._count(corrupt_removed=1)
            return None
        return exe, len(data), data

    def _from_disk(self, key: str) -> tuple[Executable, int] | None:
        got = self._verified(self.disk, key)
        if got is None:
            return None
        self._count(hits_disk=1, bytes_read=got[1])
        return got[0], got[1]

    def _from_shared(self, key: str) -> tuple[Executable, int] | None:
        if self.shared is None:
            return None
        try:
            got = self._verified(self.shared, key)
        except OSError as exc:
            warnings.warn(
                f"neuron cache: shared store {self.shared.location} unreadable: {exc}", stacklevel=2
            )
            return None
        if got is None:
            return None
        self.disk.put(key, got[2])  # fill the local level so the next process hits on disk
        self._count(hits_shared=1, bytes_read=got[1])
        return got[0], got[1]

    # ------------------------------------------------------------------ bookkeeping
    def _count(self, **delta: Any) -> None:
        with self._counter_lock:
            self.counters.add(**delta)
        self.persistent.add(**delta)

    def count_eager_fallback(self) -> None:
        self._count(eager_fallbacks=1)

    def stats(self) -> dict[str, Any]:
        """What `harness cache stats --json` prints."""
        shared: dict[str, Any] | None = None
        if self.shared is not None:
            shared = {"location": self.shared.location}
            try:
                shared.update(entries=sum(1 for _ in self.shared.keys()), bytes=self.shared.total_bytes())
            except OSError as exc:
                shared["error"] = str(exc)
        return {
            "cache_dir": str(self.config.disk_dir),
            "disk": {"entries": sum(1 for _ in self.disk.keys()), "bytes": self.disk.total_bytes()},
            "shared": shared,
            "memory": {
                "entries": len(self.memory),
                "bytes": self.memory.nbytes,
                "max_entries": self.config.max_entries,
                "max_bytes": self.config.max_bytes,
                "evictions": self.memory.evictions,
            },
            "process": self.counters.to_dict(),
            "cumulative": self.persistent.read().to_dict(),
        }

    def clear(self, shared: bool = False) -> dict[str, int]:
        """Empty memory and disk (and the shared store when asked); returns entries removed."""
        self.memory.clear()
        removed = {"disk": self.disk.clear()}
        self.persistent.clear()
        if shared and self.shared is not None:
            removed["shared"] = self.shared.clear()
        return removed


_PROCESS_COUNTERS = Counters()  # this process's counts over every cache configuration it used
_CACHE: NeffCache | None = None
_CACHE_LOCK = threading.Lock()


def get_cache() -> NeffCache:
    """The process cache for the current environment (rebuilt when the cache env vars change)."""
    global _CACHE
    config = CacheConfig.from_env()
    with _CACHE_LOCK:
        if _CACHE is None or _CACHE.config != config:
            _CACHE = NeffCache(config, _PROCESS_COUNTERS)
        return _CACHE
