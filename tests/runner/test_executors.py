"""Executor selection: local by default, ray only when asked for, with a clear error without it."""

from __future__ import annotations

import sys

import pytest

from harness.executors import make_executor
from harness.workers import WorkerLimits


def test_ray_without_the_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(RuntimeError, match=r"neuron-coverage-harness\[ray\]"):
        make_executor("ray", "runner.trivial_tier:TIER", "cpu", 1, WorkerLimits())


def test_unknown_executor_is_refused():
    with pytest.raises(ValueError, match="local, ray"):
        make_executor("dask", "runner.trivial_tier:TIER", "cpu", 1, WorkerLimits())
    assert make_executor("local", "runner.trivial_tier:TIER", "cpu", 3, WorkerLimits()).workers == 3


def test_each_worker_gets_its_share_of_the_cores_as_an_integer(tmp_path, case_file, monkeypatch):
    """OMP/MKL/OpenBLAS threads of a worker = cores // workers, as a number (not a Python repr)."""
    import json
    import os

    import pandas as pd

    from harness.runner import RunOptions, run_tier
    from runner.conftest import TRIVIAL

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    cases = case_file([(f"env{i}", "env") for i in range(4)])
    run_tier(RunOptions(tier=TRIVIAL, out=tmp_path / "run", backend="cpu", models=cases, workers=2, progress=False))
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    seen = [json.loads(m) for m in rows.loc[rows["stage"] == "run", "metrics"]]
    assert len(seen) == 4
    assert all(m == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"} for m in seen), seen


def test_worker_threads_share_the_cores():
    from harness.executors.local import worker_threads

    assert [worker_threads(w, cores=8) for w in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
