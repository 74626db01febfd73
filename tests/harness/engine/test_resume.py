"""Journal and restart: kill -9 mid-run, restart, every case appears exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pandas as pd
import pytest

from harness.engine.journal import JOURNAL_FILE, Journal
from harness.engine.runner import RunOptions, in_shard, parse_shard, run_tier
from harness.engine.workers import WorkerLimits
from harness.errors import RunDirMismatch
from tests.harness.engine.conftest import TRIVIAL, harness_cmd


def _rec(tier, case_id, status="pass"):
    return {
        "tier": tier,
        "case_id": case_id,
        "outcome": {"case_id": case_id, "tier": tier, "stages": [{"stage": "run", "status": status}]},
    }


def test_journal_drops_a_torn_last_line_and_keeps_appending(tmp_path):
    with Journal(tmp_path) as j:
        assert j.append_many([_rec("t", "a"), _rec("t", "b")]) == 2
        assert j.append(_rec("t", "a")) is False  # already journaled: no duplicate line
    path = tmp_path / JOURNAL_FILE
    with open(path, "ab") as fh:
        fh.write(b'{"tier": "t", "case_id": "c", "outc')  # a kill -9 in the middle of a write
    with Journal(tmp_path) as j:
        assert j.done("t") == {"a", "b"} and j.dropped_tail > 0
        j.append(_rec("t", "c"))
    lines = path.read_bytes().splitlines()
    assert [json.loads(line)["case_id"] for line in lines] == ["a", "b", "c"]
    assert Journal(tmp_path).done("t") == {"a", "b", "c"}


def test_kill_dash_9_then_restart_runs_every_case_exactly_once(tmp_path, case_file, subprocess_env):
    n = 24
    cases = case_file([(f"c{i:02d}", "sleep:0.25") for i in range(n)])
    out = tmp_path / "run"
    cmd = harness_cmd(
        "run",
        "--tier",
        TRIVIAL,
        "--backend",
        "cpu",
        "--models",
        cases,
        "--workers",
        "2",
        "--out",
        str(out),
        "--no-progress",
        "--json",
    )
    proc = subprocess.Popen(cmd, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    journal = out / JOURNAL_FILE
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_bytes().splitlines()) >= 4:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(Journal(out).done("trivial"))
    assert 4 <= done_before < n
    worker_pids = {r["outcome"]["worker"]["pid"] for r in Journal(out).records()}
    # the orphaned workers notice the runner is gone and exit
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in worker_pids):
        time.sleep(0.2)
    assert not [p for p in worker_pids if os.path.exists(f"/proc/{p}")]

    again = subprocess.run(cmd, env=subprocess_env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["resumed"] == done_before and summary["ran"] == n - done_before
    assert summary["counts"] == {"pass": n}
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 2 * n
    assert not df.duplicated(["tier", "case_id", "stage"]).any()
    assert sorted(df.case_id.unique()) == [f"c{i:02d}" for i in range(n)]
    assert df.run_id.nunique() == 1
    lines = (out / JOURNAL_FILE).read_bytes().splitlines()
    assert len(lines) == n and len({json.loads(x)["case_id"] for x in lines}) == n


def test_restart_with_another_backend_is_refused(tmp_path, case_file):
    models = case_file([("a", "pass")])
    run_tier(RunOptions(tier=TRIVIAL, out=tmp_path, backend="cpu", models=models, progress=False))
    with pytest.raises(RunDirMismatch, match="backend"):
        run_tier(RunOptions(tier=TRIVIAL, out=tmp_path, backend="neuron", models=models, progress=False))


def test_shards_partition_the_cases(tmp_path, case_file):
    ids = [f"m{i}" for i in range(30)]
    models = case_file([(i, "pass") for i in ids])
    seen = []
    for i in (1, 2, 3):
        s = run_tier(
            RunOptions(
                tier=TRIVIAL,
                out=tmp_path / f"s{i}",
                backend="cpu",
                models=models,
                shard=parse_shard(f"{i}/3"),
                workers=1,
                progress=False,
            )
        )
        part = pd.read_parquet(tmp_path / f"s{i}" / "results.parquet").case_id.unique().tolist()
        assert s["cases"] == len(part) and all(in_shard(c, (i, 3)) for c in part)
        seen += part
    assert sorted(seen) == sorted(ids)  # disjoint and complete
    for bad in ("0/3", "4/3", "x"):
        with pytest.raises(ValueError):
            parse_shard(bad)


def test_progress_bar_shows_counts_by_status(tmp_path, case_file, capsys):
    models = case_file([("a", "pass"), ("b", "fail"), ("c", "raise")])
    run_tier(
        RunOptions(
            tier=TRIVIAL,
            out=tmp_path,
            backend="cpu",
            models=models,
            workers=1,
            progress=True,
            limits=WorkerLimits(timeout=30),
        )
    )
    err = capsys.readouterr().err
    assert "3/3" in err and "pass=1" in err and "fail=1" in err and "error=1" in err
