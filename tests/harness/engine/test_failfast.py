"""Fail-fast against a baseline (`harness run --maxfail N / --exitfirst`, harness.engine.failfast): the run
stops at the N-th case that regresses, stays resumable, and counts only regressions."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.engine.journal import Journal
from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits
from tests.harness.engine.conftest import TRIVIAL, harness_cmd

IDS = [f"c{i}" for i in range(8)]


def _run(out, models, **kw):
    return run_tier(
        RunOptions(
            tier=TRIVIAL,
            out=out,
            backend="cpu",
            models=models,
            workers=1,
            progress=False,
            order="listed",
            limits=WorkerLimits(timeout=60),
            **kw,
        )
    )


@pytest.fixture
def baseline(tmp_path, case_file):
    """A clean run where c0..c7 pass, except c1, which already fails."""
    path = tmp_path / "baseline"
    _run(path, case_file([(i, "fail" if i == "c1" else "pass") for i in IDS], "clean.json"))
    return path


def test_exitfirst_stops_at_the_first_regressing_case_and_the_same_command_continues(
    tmp_path, case_file, baseline
):
    broken = case_file([(i, "fail" if i in ("c1", "c3", "c6") else "pass") for i in IDS], "broken.json")
    out = tmp_path / "run"
    first = _run(out, broken, baseline=str(baseline), maxfail=1)
    # c1 failed in the baseline too: no regression; c3 is the first, and nothing after it ran
    assert first["stopped"]["regressions"] == [
        {
            "case_id": "c3",
            "stage": "check",
            "status": "fail",
            "reason": "mismatch",
            "failing_op": None,
            "verdict": "FAIL",
            "detail": "pass -> fail",
        }
    ]
    assert Journal(out).done("trivial") == {"c0", "c1", "c2", "c3"}
    assert first["stopped"]["not_run"] == 4 and first["ran"] == 4
    second = _run(out, broken, baseline=str(baseline), maxfail=1)
    assert second["resumed"] == 4 and second["stopped"]["regressions"][0]["case_id"] == "c6"
    third = _run(out, broken, baseline=str(baseline), maxfail=1)
    assert third["stopped"] is None and Journal(out).done("trivial") == set(IDS)


def test_maxfail_counts_regressing_cases_and_a_clean_run_is_not_stopped(tmp_path, case_file, baseline):
    broken = case_file([(i, "fail" if i in ("c2", "c4", "c5") else "pass") for i in IDS], "broken.json")
    got = _run(tmp_path / "two", broken, baseline=str(baseline), maxfail=2)
    assert [r["case_id"] for r in got["stopped"]["regressions"]] == ["c2", "c4"]
    assert "c5" not in Journal(tmp_path / "two").done("trivial")
    same = case_file([(i, "fail" if i == "c1" else "pass") for i in IDS], "same.json")
    assert _run(tmp_path / "clean", same, baseline=str(baseline), maxfail=1)["stopped"] is None


def test_a_crash_is_a_regression_too(tmp_path, case_file, baseline):
    broken = case_file([(i, "segv" if i == "c2" else "pass") for i in IDS], "crash.json")
    got = _run(tmp_path / "run", broken, baseline=str(baseline), maxfail=1)
    assert [(r["case_id"], r["status"]) for r in got["stopped"]["regressions"]][0] == ("c2", "crash")
    assert Journal(tmp_path / "run").done("trivial") == {"c0", "c1", "c2"}


def test_maxfail_without_a_baseline_of_the_tier_is_a_clear_error(tmp_path, case_file):
    with pytest.raises(ValueError, match="no results of tier"):
        _run(tmp_path / "run", case_file([("a", "pass")]), baseline=str(tmp_path / "nothing"), maxfail=1)


def test_cli_exitfirst_exits_1_with_the_regression_in_json(tmp_path, case_file, baseline, subprocess_env):
    broken = case_file([(i, "fail" if i == "c5" else "pass") for i in IDS], "broken.json")
    cmd = harness_cmd(
        "run",
        "--tier",
        TRIVIAL,
        "--backend",
        "cpu",
        "--models",
        broken,
        "--workers",
        "1",
        "--order",
        "listed",
        "--baseline",
        str(baseline),
        "-x",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
        "--json",
    )
    proc = subprocess.run(cmd, env=subprocess_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["stopped"]["regressions"][0]["case_id"] == "c5"
