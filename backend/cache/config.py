"""Where the caches live and how big the memory level is (environment variables, read on use)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "neuron-coverage-harness"


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class CacheConfig:
    disk_dir: Path  # NEURON_CACHE_DIR, default <user cache dir>/neuron-coverage-harness/neff-cache
    shared: str | None  # NEURON_SHARED_CACHE_DIR: a directory or <scheme>://..., None = no shared level
    max_entries: int  # NEURON_CACHE_MAX_ENTRIES (memory level)
    max_bytes: int  # NEURON_CACHE_MAX_BYTES (memory level)

    @classmethod
    def from_env(cls) -> CacheConfig:
        disk = os.environ.get("NEURON_CACHE_DIR") or os.path.join(
            platformdirs.user_cache_dir(APP_NAME), "neff-cache"
        )
        return cls(
            disk_dir=Path(disk).expanduser(),
            shared=os.environ.get("NEURON_SHARED_CACHE_DIR") or None,
            max_entries=_int_env("NEURON_CACHE_MAX_ENTRIES", 1024),
            max_bytes=_int_env("NEURON_CACHE_MAX_BYTES", 512 * 1024 * 1024),
        )
