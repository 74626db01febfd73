"""A tiny BERT through the model path (tests/harness/engine/model_tier.py) with a planted hang in a
forward op and a planted crash in a backward-only op: each row names the op, its phase and the
module it ran in (route call_journal), and is blamed on the backend."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from contracts.rows import result_row
from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits

pytestmark = pytest.mark.slow

TIER = "tests.harness.engine.model_tier:TIER"
CASE = "catalog/bert"


def _run(tmp_path, monkeypatch, fault, baseline=None):
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({"faults": [{"name": "planted", **fault}]}))
    monkeypatch.setenv("NEURON_FAULTS", str(path))
    monkeypatch.setenv("HARNESS_STALL_SECONDS", "3")
    monkeypatch.setenv("HARNESS_CASE_LIMIT_FLOOR", "8")
    run_tier(
        RunOptions(
            tier=TIER,
            out=tmp_path / "run",
            backend="neuron",
            workers=1,
            limits=WorkerLimits(timeout=120),
            progress=False,
            baseline=baseline,
            use_baseline=baseline is not None,
        )
    )
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    outcome = json.loads((tmp_path / "run" / "journal.jsonl").read_text().splitlines()[0])["outcome"]
    return rows, outcome


def test_a_hang_in_a_forward_op_names_the_op_and_the_module(tmp_path, monkeypatch):
    from reports.tables import write_run_tables

    base = tmp_path / "baseline"  # the case took 2 s: its limit is the floor, 8 s, not the tier's 120 s
    stages = ("load", "forward", "backward")
    clean = [
        {"tier": "one_model", "case_id": CASE, "stage": s, "status": "pass", "seconds": 0.7} for s in stages
    ]
    write_run_tables(base, {"run_id": "b", "backend": "neuron"}, [result_row(r, "b") for r in clean], [], {})
    rows, outcome = _run(tmp_path, monkeypatch, {"op": "aten.gelu.default", "kind": "hang"}, str(base))
    assert (rows.status == "timeout").all() and (rows.blame == "backend").all()
    assert (rows.root_cause_op == "aten.gelu.default").all()
    rc = json.loads(rows.root_cause.iloc[0])
    assert rc["found"] and (rc["route"], rc["kind"], rc["phase"]) == ("call_journal", "hang", "forward")
    assert rc["module_path"].startswith("encoder.layer.") and "intermediate" in rc["module_path"]
    assert rc["source_line"] and rc["input_dtypes"][0] == "float32" and len(rc["input_shapes"][0]) == 3
    # killed at the case's own limit first, then judged under the tier's: the journal's stall watch
    # ended it seconds after the call stopped returning
    assert outcome["worker"]["first_attempt"]["limit"] == 8.0
    assert outcome["worker"]["died"] == "worker_stalled" and outcome["seconds"] < 60


def test_a_crash_in_a_backward_op_names_the_op_and_the_forward_module(tmp_path, monkeypatch):
    rows, outcome = _run(tmp_path, monkeypatch, {"op": "aten.gelu_backward.default", "kind": "crash"})
    assert (rows.status == "crash").all() and (rows.blame == "backend").all()
    assert (rows.root_cause_op == "aten.gelu_backward.default").all()
    rc = json.loads(rows.root_cause.iloc[0])
    assert rc["found"] and (rc["route"], rc["kind"], rc["phase"]) == ("call_journal", "crash", "backward")
    assert "intermediate" in rc["module_path"]  # where the forward call that made its node ran
    assert rc["extra"]["autograd_node"] == "GeluBackward0"
