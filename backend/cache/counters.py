"""Cache counters: per process, and cumulative per cache directory (``stats.json``).

The cumulative file is what `harness cache stats` shows across runs; it is updated under a file
lock with an atomic rename, so concurrent processes never lose or tear an update.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import filelock


@dataclass
class Counters:
    compiles: int = 0
    compile_seconds: float = 0.0
    hits_memory: int = 0
    hits_disk: int = 0
    hits_shared: int = 0
    inflight_waits: int = 0  # a compile already running in this process was awaited, not redone
    corrupt_removed: int = 0
    compile_failures: int = 0
    eager_fallbacks: int = 0  # graphs run eagerly after a compile failure (fallback switch on)
    bytes_written: int = 0
    bytes_read: int = 0

    def add(self, **delta: float) -> None:
        for k, v in delta.items():
            setattr(self, k, getattr(self, k) + v)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["compile_seconds"] = round(d["compile_seconds"], 6)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Counters:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names and isinstance(v, (int, float))})


class PersistentCounters:
    """Cumulative counters in `<cache dir>/stats.json`."""

    def __init__(self, root: Path) -> None:
        self.path = root / "stats.json"
        self._thread_lock = threading.Lock()

    def read(self) -> Counters:
        try:
            return Counters.from_dict(json.loads(self.path.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return Counters()

    def add(self, **delta: float) -> None:
        if not delta:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._thread_lock, filelock.FileLock(str(self.path) + ".lock", timeout=60):
            c = self.read()
            c.add(**delta)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".stats.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(c.to_dict(), f, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
