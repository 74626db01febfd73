"""Executor selection: local by default, ray only when asked for, with a clear error without it."""

from __future__ import annotations

import json
import os
import sys

import pytest

from harness.engine.executors import make_executor
from harness.engine.executors.base import Executor
from harness.engine.executors.local import LocalExecutor
from harness.engine.workers import WorkerLimits


def test_ray_without_the_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(RuntimeError, match=r"neuron-coverage-harness\[ray\]"):
        make_executor("ray", "tests.harness.engine.trivial_tier:TIER", "cpu", 1, WorkerLimits())


def test_unknown_executor_is_refused():
    with pytest.raises(ValueError, match="local, ray"):
        make_executor("dask", "tests.harness.engine.trivial_tier:TIER", "cpu", 1, WorkerLimits())
    assert (
        make_executor("local", "tests.harness.engine.trivial_tier:TIER", "cpu", 3, WorkerLimits()).workers
        == 3
    )


def test_an_executor_declares_what_the_runner_calls_with_answers_for_the_optional_members():
    with pytest.raises(TypeError, match="drain"):  # run and drain are each executor's own
        type("OnlyRun", (Executor,), {"run": lambda self, chunks, on_results, plan=None: None})()

    class Minimal(Executor):
        def run(self, chunks, on_results, plan=None):
            on_results([])

        def drain(self):
            pass

    minimal = Minimal()
    minimal.prestart()
    minimal.close()
    assert minimal.fingerprints() is None  # the runner then probes in a process of its own
    assert minimal.describe() == {"executor": "Minimal"}
    local = make_executor("local", "tests.harness.engine.trivial_tier:TIER", "cpu", 1, WorkerLimits())
    assert isinstance(local, LocalExecutor) and isinstance(local, Executor)
    assert local.fingerprints(start=False) is None  # no worker is started for nothing


def test_each_worker_gets_its_share_of_the_cores_as_an_integer(tmp_path, case_file, monkeypatch):
    """OMP/MKL/OpenBLAS threads of a worker = cores // workers, as a number (not a Python repr)."""
    import json
    import os

    import pandas as pd

    from harness.engine.runner import RunOptions, run_tier
    from tests.harness.engine.conftest import TRIVIAL

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    cases = case_file([(f"env{i}", "env") for i in range(4)])
    run_tier(
        RunOptions(tier=TRIVIAL, out=tmp_path / "run", backend="cpu", models=cases, workers=2, progress=False)
    )
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    seen = [json.loads(m) for m in rows.loc[rows["stage"] == "run", "metrics"]]
    assert len(seen) == 4
    assert all(
        m == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"} for m in seen
    ), seen


def test_worker_threads_share_the_cores():
    from harness.engine.executors.local import worker_threads

    assert [worker_threads(w, cores=8) for w in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


PRESTART = "tests.harness.engine.trivial_tier:PRESTART"


def _prestart_env(monkeypatch, tmp_path, expect):
    setup_dir = tmp_path / "setups"
    setup_dir.mkdir()
    monkeypatch.setenv("TRIVIAL_SETUP_DIR", str(setup_dir))
    monkeypatch.setenv("TRIVIAL_EXPECT_WORKERS", str(expect))
    return setup_dir


def test_local_workers_start_up_while_the_cases_are_listed(tmp_path, case_file, monkeypatch):
    """The listing waits for both workers' setup: it only finishes because they were spawned before
    it; the run then uses exactly those processes (no second start)."""
    from harness.engine.runner import RunOptions, run_tier

    setup_dir = _prestart_env(monkeypatch, tmp_path, expect=2)
    cases = case_file([(f"c{i}", "pass") for i in range(6)])
    summary = run_tier(
        RunOptions(
            tier=PRESTART,
            out=tmp_path / "run",
            backend="cpu",
            models=cases,
            workers=2,
            progress=False,
            use_baseline=False,
        )
    )
    assert summary["counts"] == {"pass": 6}
    started = {int(p.stem) for p in setup_dir.iterdir()}
    outcomes = [
        json.loads(line)["outcome"] for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines()
    ]
    # both were started once; the cases ran in those processes only (which of the two takes the
    # trivial cases is the scheduler's business: one may finish them all before the other asks)
    used = {o["worker"]["pid"] for o in outcomes}
    assert len(started) == 2 and used and used <= started
    firsts = [o["worker"] for o in outcomes if "startup_seconds" in o["worker"]]
    assert len(firsts) == len(used) and all("startup_overlapped_seconds" in w for w in firsts)


def test_pre_started_workers_are_stopped_when_the_listing_fails_or_nothing_runs(
    tmp_path, case_file, monkeypatch
):
    from harness.engine.runner import RunOptions, run_tier

    setup_dir = _prestart_env(monkeypatch, tmp_path, expect=1)
    monkeypatch.setenv("TRIVIAL_LISTING_FAILS", "1")
    opts = RunOptions(
        tier=PRESTART,
        out=tmp_path / "run",
        backend="cpu",
        models=case_file([("a", "pass")]),
        workers=2,
        progress=False,
        use_baseline=False,
    )
    with pytest.raises(RuntimeError, match="planted listing failure"):
        run_tier(opts)
    pids = {int(p.stem) for p in setup_dir.iterdir()}
    assert pids and not any(os.path.exists(f"/proc/{pid}") for pid in pids)  # killed and reaped
    monkeypatch.delenv("TRIVIAL_LISTING_FAILS")
    run_tier(opts)  # runs the case
    before = set(setup_dir.iterdir())
    monkeypatch.setenv("TRIVIAL_EXPECT_WORKERS", "0")
    assert run_tier(opts)["ran"] == 0  # a finished run dir: no worker is started for nothing
    assert set(setup_dir.iterdir()) == before
