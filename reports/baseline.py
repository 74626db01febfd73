"""Where the baseline lives, and how a run becomes it.

The baseline is a directory shaped like a run directory (runs/results/fallbacks/per_op Parquet
files) plus ``BASELINE.json`` saying which run it came from. Its location, first match wins:

1. an explicit path (``--dir`` / ``harness compare RUN BASELINE``),
2. the environment variable ``HARNESS_BASELINE_DIR``,
3. ``./baseline`` in the current directory (check it in, or cache it in CI).

``update`` builds the new baseline beside the old one and swaps it in with renames, so a crash
never leaves a half-written baseline. A nightly directory (one subdirectory per tier) becomes one
baseline holding every tier.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from contracts.settings import current
from reports.schema import SCHEMA_VERSION, TABLES
from reports.tables import table_dirs

MARKER = "BASELINE.json"


def baseline_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The baseline directory to use (it may not exist yet)."""
    return Path(explicit) if explicit else current().baseline_dir


def exists(path: str | os.PathLike | None = None) -> bool:
    return (baseline_dir(path) / "results.parquet").is_file()


def update(run_dir: str | os.PathLike, dest: str | os.PathLike | None = None) -> Path:
    """Make run_dir the baseline: copy its tables (every tier) into the baseline directory."""
    sources = table_dirs(run_dir)  # raises FileNotFoundError with the path when there is no run
    dest = baseline_dir(dest).resolve()
    if dest in {s.resolve() for s in sources}:
        raise ValueError(f"{run_dir} already is the baseline directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new-", dir=dest.parent))
    try:
        run_ids: set[str] = set()
        for name, table in TABLES.items():
            parts = [
                pq.read_table(d / f"{name}.parquet") for d in sources if (d / f"{name}.parquet").is_file()
            ]
            merged = (
                pa.concat_tables([p.cast(table.arrow_schema) for p in parts])
                if parts
                else table.arrow_schema.empty_table()
            )
            pq.write_table(merged, tmp / f"{name}.parquet")
            if name == "runs":
                run_ids.update(merged.column("run_id").to_pylist())
        (tmp / MARKER).write_text(
            json.dumps(
                {
                    "source": str(Path(run_dir).resolve()),
                    "run_ids": sorted(run_ids),
                    "schema_version": SCHEMA_VERSION,
                    "updated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                },
                indent=2,
            )
            + "\n"
        )
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
