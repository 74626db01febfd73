"""Pass rates per tier and stage over the last runs, for the report's trend plot.

History is read from the run directories beside the reported one (same parent directory: a nightly
job writes ``DIR/<date>/...``), so no separate history file can drift from the data. A run is
identified by its run ids; a baseline copy of a run is counted once. Only the columns needed are
read, so a long history stays cheap.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from reports.tables import table_dirs


@dataclass
class RunPoint:
    run_ids: tuple[str, ...]
    when: dt.datetime
    path: str
    #: (tier, stage) -> (passed, total cases)
    rates: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.when.strftime("%m-%d %H:%M")


def _point(run_dir: Path) -> RunPoint | None:
    try:
        dirs = table_dirs(run_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    run_ids: set[str] = set()
    times: list[dt.datetime] = []
    rates: dict[tuple[str, str], list[int]] = {}
    for d in dirs:
        try:
            if (d / "runs.parquet").is_file():
                runs = pq.read_table(
                    d / "runs.parquet", columns=["run_id", "started_at", "finished_at"]
                ).to_pylist()
                for r in runs:
                    run_ids.add(r["run_id"])
                    t = r["started_at"] or r["finished_at"]
                    if t is not None:
                        times.append(t)
            res = pq.read_table(d / "results.parquet", columns=["run_id", "tier", "stage", "status"])
        except (OSError, ValueError, KeyError, pa.ArrowException):  # an unreadable old run: not in the trend
            continue
        run_ids.update(pc.unique(res.column("run_id")).to_pylist())
        counts = res.group_by(["tier", "stage", "status"]).aggregate([("run_id", "count")]).to_pylist()
        for r in counts:  # one row per (tier, stage, status): cheap however many cases the run had
            acc = rates.setdefault((r["tier"], r["stage"]), [0, 0])
            acc[0] += r["run_id_count"] if r["status"] == "pass" else 0
            acc[1] += r["run_id_count"]
    if not run_ids:
        return None
    when = (
        min(times)
        if times
        else dt.datetime.fromtimestamp(os.path.getmtime(dirs[0] / "results.parquet"), tz=dt.UTC)
    )
    return RunPoint(tuple(sorted(run_ids)), when, str(run_dir), {k: (v[0], v[1]) for k, v in rates.items()})


def load_history(run_dir: str | os.PathLike, limit: int = 10) -> list[RunPoint]:
    """The last `limit` runs up to and including run_dir, oldest first."""
    run_dir = Path(run_dir).resolve()
    current = _point(run_dir)
    if current is None:
        return []
    points = {current.run_ids: current}
    parent = run_dir.parent
    siblings = sorted(
        (p for p in parent.iterdir() if p.is_dir() and p != run_dir and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )[: limit * 4]
    for sib in siblings:
        pt = _point(sib)
        if pt is not None and pt.when <= current.when and pt.run_ids not in points:
            points[pt.run_ids] = pt
    return sorted(points.values(), key=lambda p: p.when)[-limit:]
