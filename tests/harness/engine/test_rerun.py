"""The runner blames every row: worker deaths and judge-less tiers are re-run on the cpu reference."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits
from tests.harness.engine.conftest import TRIVIAL

CASES = [
    ("dev-segv", "device:segv"),
    ("both-segv", "segv"),
    ("dev-fail", "device:fail"),
    ("both-fail", "fail"),
    ("ok", "pass"),
]


def _opts(tmp_path, case_file, backend="neuron"):
    return RunOptions(
        tier=TRIVIAL,
        out=tmp_path / "run",
        backend=backend,
        models=case_file(CASES),
        workers=1,
        limits=WorkerLimits(timeout=60),
        progress=False,
    )


def _blames(run_dir):
    df = pd.read_parquet(run_dir / "results.parquet")
    return {
        (r.case_id, r.stage): (r.status, r.blame if isinstance(r.blame, str) else None)
        for r in df.itertuples()
    }, df


def test_device_only_failures_are_the_backends_and_shared_ones_the_harness(tmp_path, case_file):
    summary = run_tier(_opts(tmp_path, case_file))
    blames, df = _blames(tmp_path / "run")
    assert blames[("dev-segv", "run")] == ("crash", "backend")  # the worker died on the device only
    assert blames[("both-segv", "run")] == ("crash", "harness")  # it dies on the reference too
    assert blames[("dev-fail", "check")] == ("fail", "backend")
    assert blames[("both-fail", "check")] == ("fail", "harness")
    assert blames[("ok", "check")] == ("pass", None)
    ev = json.loads(df[(df.case_id == "dev-segv") & (df.stage == "run")].blame_evidence.iloc[0])
    assert ev["reference_backend"] == "cpu" and ev["reference"]["status"] == "pass"
    # the reference outcomes are journaled beside the run: a restart does not re-run them
    assert (tmp_path / "run" / "reference" / "journal.jsonl").is_file()
    assert summary["by_stage_blame"]["check"] == {"backend": 2, "harness": 2}
    assert summary["coverage"]["check"]["models_by_blame"] == {"backend": 2, "harness": 2}
    again = run_tier(_opts(tmp_path, case_file))
    assert again["ran"] == 0 and again["by_stage_blame"] == summary["by_stage_blame"]
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (
        run_json["tiers"]["trivial"]["reference_ran"] == 0
        and run_json["tiers"]["trivial"]["reference_cases"] == 4
    )


def test_on_the_reference_backend_nothing_is_re_run_and_backend_is_impossible(tmp_path, case_file):
    run_tier(_opts(tmp_path, case_file, backend="cpu"))
    blames, _ = _blames(tmp_path / "run")
    assert blames[("dev-segv", "run")] == ("pass", None)
    assert blames[("both-segv", "run")] == ("crash", "harness")
    assert blames[("both-fail", "check")] == ("fail", "harness")
    assert not (tmp_path / "run" / "reference").exists()


@pytest.mark.slow
def test_a_model_that_crashes_the_device_worker_is_the_backends(tmp_path, monkeypatch):
    """A planted device crash (SIGSEGV in gelu) kills the worker; the runner re-runs the case on cpu,
    where it passes: every row of the case is the backend's."""
    faults = tmp_path / "faults.yaml"
    faults.write_text("version: 1\nfaults:\n  - {name: gelu-crash, op: aten.gelu, kind: crash}\n")
    monkeypatch.setenv("NEURON_FAULTS", str(faults))  # the workers inherit it; the cpu reference ignores it
    run_tier(
        RunOptions(
            tier="tests.harness.engine.model_tier:TIER",
            out=tmp_path / "run",
            backend="neuron",
            workers=1,
            limits=WorkerLimits(timeout=300),
            progress=False,
        )
    )
    blames, df = _blames(tmp_path / "run")
    assert blames[("catalog/bert", "load")] == ("crash", "backend")
    assert blames[("catalog/bert", "forward")] == ("crash", "backend")
    ev = json.loads(df[df.stage == "forward"].blame_evidence.iloc[0])
    assert ev["reference"]["status"] == "pass"
