"""Fixtures for the report tests: run directories built from synthetic rows (reports_synth)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.reports.reports_synth import EVENTS, base_rows


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    """make_run(name, rows=None, run_id=None, edit=None, started_at=...) -> run dir with the four tables."""
    from reports.tables import write_run_tables

    def make(
        name: str = "run1",
        rows: list[dict[str, Any]] | None = None,
        *,
        run_id: str | None = None,
        edit: Callable[[list[dict[str, Any]]], None] | None = None,
        started_at: str = "2026-11-28T01:00:00",
        events: list[dict[str, Any]] | None = None,
        parent: Path | None = None,
    ) -> Path:
        rows = copy.deepcopy(rows if rows is not None else base_rows())
        if edit:
            edit(rows)
        run_dir = (parent or tmp_path / "runs") / name
        meta = {
            "run_id": run_id or name,
            "backend": "neuron",
            "started_at": started_at,
            "duration_seconds": 12.5,
            "lowering_table_version": "3",
            "tiers": ["unit", "representative", "full"],
        }
        write_run_tables(run_dir, meta, rows, copy.deepcopy(EVENTS if events is None else events))
        return run_dir

    return make
