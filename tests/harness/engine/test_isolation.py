"""A segfault, a hang, a memory hog, an exception: each becomes its row and the run completes."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits
from tests.harness.engine.conftest import CHUNKED, TRIVIAL

PLANTED = [
    ("ok1", "pass"),
    ("bad", "fail"),
    ("raise", "raise"),
    ("memerr", "memerror"),
    ("segv", "segv"),
    ("hang", "hang"),
    ("hog", "oom"),
    ("exit", "exit"),
    ("ok2", "pass"),
]
EXPECTED = {  # case -> (status, reason prefix, error_class)
    "ok1": ("pass", "", ""),
    "ok2": ("pass", "", ""),
    "bad": ("fail", "mismatch", ""),
    "raise": ("error", "exception:ValueError", "ValueError"),
    "memerr": ("oom", "exception:MemoryError", "MemoryError"),
    "segv": ("crash", "worker_crash:SIGSEGV", "SIGSEGV"),
    "hang": ("timeout", "worker_timeout", "Timeout"),
    "hog": ("oom", "worker_memory_limit", "MemoryLimit"),
    "exit": ("crash", "worker_exit:3", "WorkerExit"),
}


def _run(tier, tmp_path, case_file, workers=2, **limits):
    limits = {"timeout": 4.0, "memory_bytes": 300 << 20, **limits}
    opts = RunOptions(
        tier=tier,
        out=tmp_path / "run",
        backend="cpu",
        models=case_file(PLANTED),
        workers=workers,
        limits=WorkerLimits(**limits),
        progress=False,
    )
    return run_tier(opts), pd.read_parquet(tmp_path / "run" / "results.parquet")


@pytest.mark.parametrize("tier", [TRIVIAL, CHUNKED], ids=["one-per-worker-call", "chunks"])
def test_every_failure_mode_gives_its_row(tier, tmp_path, case_file):
    summary, df = _run(tier, tmp_path, case_file)
    assert summary["cases"] == len(PLANTED) and summary["ran"] == len(PLANTED)
    assert len(df) == 2 * len(PLANTED)  # one row per case and stage, none lost
    assert set(df.groupby("case_id").stage.apply(frozenset)) == {frozenset({"run", "check"})}
    check = (
        df[df.stage == "check"].fillna({"reason": "", "error_class": "", "message": ""}).set_index("case_id")
    )
    for case, (status, reason, error_class) in EXPECTED.items():
        row = check.loc[case]
        assert row.status == status, (case, row.status, row.reason, row.message)
        assert row.reason.startswith(reason), (case, row.reason)
        assert row.error_class == error_class, (case, row.error_class)
    assert "planted failure" in check.loc["raise"].message
    assert summary["counts"] == {"pass": 2, "fail": 1, "error": 1, "oom": 2, "crash": 2, "timeout": 1}


def test_crash_in_a_chunk_only_blames_the_guilty_case(tmp_path, case_file):
    cases = [("a", "pass"), ("b", "pass"), ("c", "segv"), ("d", "pass")]  # one chunk of 4
    opts = RunOptions(
        tier=CHUNKED,
        out=tmp_path / "run",
        backend="cpu",
        models=case_file(cases),
        workers=1,
        limits=WorkerLimits(timeout=10),
        progress=False,
    )
    summary = run_tier(opts)
    assert summary["counts"] == {"crash": 1, "pass": 3}


def test_workers_are_reused_and_recycled(tmp_path, case_file):
    from harness.engine.journal import Journal

    cases = [(f"p{i}", "pass") for i in range(6)] + [("boom", "segv"), ("after", "pass")]
    opts = RunOptions(
        tier=TRIVIAL,
        out=tmp_path / "run",
        backend="cpu",
        models=case_file(cases),
        workers=1,
        limits=WorkerLimits(timeout=10, max_cases=3),
        progress=False,
    )
    run_tier(opts)
    pids = {r["case_id"]: r["outcome"]["worker"].get("pid") for r in Journal(tmp_path / "run").records()}
    assert pids["p0"] == pids["p1"] == pids["p2"]  # reused
    assert pids["p3"] != pids["p0"]  # recycled after max_cases=3
    assert pids["boom"] is None  # it never reported: the parent wrote its row
    assert pids["after"] not in {pids[f"p{i}"] for i in range(6)}  # a fresh worker after the crash


def test_a_timeout_error_raised_in_the_tier_is_a_timeout_like_everywhere_else(tmp_path, case_file):
    """One classifier (contracts.errors): a worker and harness.stages.check agree that TimeoutError is
    a timeout."""
    from contracts.errors import classify

    opts = RunOptions(
        tier=TRIVIAL,
        out=tmp_path / "run",
        backend="cpu",
        models=case_file([("t", "timeouterror")]),
        workers=1,
        limits=WorkerLimits(timeout=30.0),
        progress=False,
    )
    run_tier(opts)
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"timeout"} and set(rows["error_class"]) == {"TimeoutError"}
    assert classify(TimeoutError("x")).status.value == "timeout"
