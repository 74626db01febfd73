"""The run journal: one JSON line per finished case, appended, flushed and fsync'ed.

Why: a nightly run must survive a `kill -9` at any moment. Each finished case is one line in
`RUNDIR/journal.jsonl`; a restart with the same run directory reads it back, skips what is done
and appends the rest. A line cut short by a kill is dropped (and cut off the file) on open, so the
case it described simply runs again; a case recorded twice (impossible in normal operation) is
read once, first record wins.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

JOURNAL_FILE = "journal.jsonl"
JOURNAL_VERSION = 1


class Journal:
    """Append-only JSONL of case records keyed by (tier, case_id)."""

    def __init__(self, run_dir: str | os.PathLike, fsync: bool = True) -> None:
        self.path = Path(run_dir) / JOURNAL_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], dict[str, Any]] = {}
        self.dropped_tail = 0  # bytes of a truncated last line removed on open
        self._load()
        self._fh = open(self.path, "ab")

    # -- reading ---------------------------------------------------------------------------
    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good_end = data.rfind(b"\n") + 1  # everything after the last newline is a torn write
        if good_end < len(data):
            self.dropped_tail = len(data) - good_end
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())
        for line in data[:good_end].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a corrupt line in the middle (disk trouble): the case will rerun
            if not isinstance(rec, dict) or "case_id" not in rec or "tier" not in rec:
                continue
            self._records.setdefault((rec["tier"], rec["case_id"]), rec)

    def done(self, tier: str) -> set[str]:
        """Case ids of `tier` already recorded."""
        return {cid for (t, cid) in self._records if t == tier}

    def records(self, tier: str | None = None) -> list[dict[str, Any]]:
        """Records in journal order (first record per case), optionally of one tier."""
        return [r for (t, _), r in self._records.items() if tier is None or t == tier]

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records())

    # -- writing ---------------------------------------------------------------------------
    def append_many(self, records: Iterable[dict[str, Any]]) -> int:
        """Append records not yet journaled; one write, flush and fsync per batch. Returns how many."""
        lines = []
        with self._lock:
            for rec in records:
                key = (rec["tier"], rec["case_id"])
                if key in self._records:
                    continue
                rec = {"v": JOURNAL_VERSION, "journaled_at": time.time(), **rec}
                self._records[key] = rec
                lines.append(json.dumps(rec, default=str, separators=(",", ":")).encode() + b"\n")
            if lines:
                self._fh.write(b"".join(lines))
                self._fh.flush()
                if self.fsync:
                    os.fsync(self._fh.fileno())
        return len(lines)

    def append(self, record: dict[str, Any]) -> bool:
        return self.append_many([record]) == 1

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
