"""The ordering's op fingerprints come from the run's own worker, not from a process of their own.

Why: a likely failure run first lands after the fixed cost before any case runs; a second process
importing torch and the device to probe the fingerprints competed with the worker's start-up for
the same cores. Tested by the order and the stored fingerprints, never by speed."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.engine import ordering
from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits

TIER = "tests.harness.engine.fault_tier:TIER"


@pytest.mark.slow
def test_an_ordered_run_takes_its_fingerprints_from_its_worker_and_runs_the_changed_op_first(
    tmp_path, monkeypatch
):
    def no_probe(*args, **kwargs):
        raise AssertionError("a local run started a fingerprint probe process")

    monkeypatch.setattr(ordering, "probe_fingerprints", no_probe)
    monkeypatch.delenv("NEURON_FAULTS", raising=False)
    common = dict(tier=TIER, backend="neuron", workers=1, limits=WorkerLimits(timeout=60), progress=False)
    run_tier(RunOptions(out=tmp_path / "clean", use_baseline=False, order="listed", **common))
    clean_fp = json.loads((tmp_path / "clean" / "run.json").read_text())[ordering.FINGERPRINT_KEY]

    faults = tmp_path / "faults.yaml"  # a kernel change on one op: the planted fault
    faults.write_text(
        yaml.safe_dump(
            {
                "faults": [
                    {"name": "softmax-1pct", "op": "aten._softmax.default", "kind": "perturb", "rel": 0.01}
                ]
            }
        )
    )
    monkeypatch.setenv("NEURON_FAULTS", str(faults))
    run_tier(RunOptions(out=tmp_path / "faulted", baseline=str(tmp_path / "clean"), **common))

    order = json.loads((tmp_path / "faulted" / "order-fault_ops.json").read_text())
    assert order["summary"]["fingerprints_compared"]
    assert order["cases"][0] == {
        "case_id": "softmax",
        "class": "changed_op",
        "ops": ["aten._softmax.default"],
    }
    assert [c["class"] for c in order["cases"][1:]] == ["rest", "rest"]
    faulted_fp = json.loads((tmp_path / "faulted" / "run.json").read_text())[ordering.FINGERPRINT_KEY]
    changed = ordering.changed_ops(
        clean_fp, faulted_fp
    )  # stored for the next run's order, as the worker saw them
    assert changed.known and not changed.everything
    assert changed.touches(["aten._softmax.default", "aten.sort.default", "aten.add.Tensor"]) == [
        "aten._softmax.default"
    ]


def test_a_backend_without_fingerprints_stores_none_and_starts_no_probe(tmp_path, monkeypatch, case_file):
    from tests.harness.engine.conftest import TRIVIAL

    monkeypatch.setattr(
        ordering, "probe_fingerprints", lambda *a, **k: (_ for _ in ()).throw(AssertionError("probe started"))
    )
    cases = case_file([("a", "pass"), ("b", "pass")])
    run_tier(
        RunOptions(
            tier=TRIVIAL,
            out=tmp_path / "run",
            backend="cpu",
            models=cases,
            progress=False,
            use_baseline=False,
        )
    )
    assert ordering.FINGERPRINT_KEY not in json.loads((tmp_path / "run" / "run.json").read_text())
