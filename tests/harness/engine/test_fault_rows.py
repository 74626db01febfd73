"""A planted crash or hang in a worker is a row of its own (crash, timeout); the other cases pass."""

from __future__ import annotations

import pytest
import yaml

from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits

TIER = "tests.harness.engine.fault_tier:TIER"


@pytest.mark.parametrize(
    "fault,status,reason",
    [
        ({"name": "sort-segv", "op": "aten.sort", "kind": "crash"}, "crash", "worker_crash:SIGSEGV"),
        ({"name": "sort-hang", "op": "aten.sort", "kind": "hang"}, "timeout", "worker_timeout"),
        ({"name": "sort-raise", "op": "aten.sort", "kind": "raise"}, "error", "exception:NeuronFaultError"),
    ],
)
def test_planted_fault_gives_its_row(tmp_path, monkeypatch, fault, status, reason):
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({"faults": [fault]}))
    monkeypatch.setenv("NEURON_FAULTS", str(path))  # the workers inherit it, as in a faulted run
    summary = run_tier(
        RunOptions(
            tier=TIER,
            out=tmp_path / "run",
            backend="neuron",
            workers=1,
            limits=WorkerLimits(timeout=8),
            progress=False,
        )
    )
    import json

    rows = {}
    for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rows[rec["case_id"]] = rec["outcome"]["stages"][0]
    assert summary["cases"] == 3
    assert rows["sort"]["status"] == status and rows["sort"]["reason"].startswith(reason), rows["sort"]
    assert rows["softmax"]["status"] == "pass" and rows["add"]["status"] == "pass"
