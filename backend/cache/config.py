"""Where the caches live and how big the memory level is (`backend.settings`, read on use)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backend import settings


@dataclass(frozen=True)
class CacheConfig:
    disk_dir: Path  # NEURON_CACHE_DIR
    shared: str | None  # NEURON_SHARED_CACHE_DIR: a directory or <scheme>://..., None = no shared level
    max_entries: int  # NEURON_CACHE_MAX_ENTRIES (memory level)
    max_bytes: int  # NEURON_CACHE_MAX_BYTES (memory level)

    @classmethod
    def from_env(cls) -> CacheConfig:
        env = settings.current()
        return cls(
            disk_dir=env.cache_dir,
            shared=env.shared_cache_dir,
            max_entries=env.cache_max_entries,
            max_bytes=env.cache_max_bytes,
        )
