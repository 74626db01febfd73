"""Expectations: a data file of known failures, rewritten from a run; unexpected passes = IMPROVED."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from harness.cli import main
from registry import expectations


def _run(tmp_path, rows, name="run"):
    rundir = tmp_path / name
    rundir.mkdir()
    cols = {k: [r.get(k, "") for r in rows] for k in ("run_id", "tier", "case_id", "stage", "status", "error_class", "message", "reason")}
    pq.write_table(pa.table(cols), rundir / "results.parquet")
    return rundir


ROWS = [
    {"tier": "unit", "case_id": "aten.mm.default-aaa", "stage": "op", "status": "pass"},
    {"tier": "unit", "case_id": "aten.conv.default-bbb", "stage": "op", "status": "error", "error_class": "RuntimeError",
     "message": "convolution_overrideable not implemented"},
    {"tier": "unit", "case_id": "aten.x.default-ccc", "stage": "op", "status": "fail", "reason": "mismatch: max_abs_err 3"},
    {"tier": "unit", "case_id": "aten.y.default-ddd", "stage": "op", "status": "skipped", "reason": "unreplayable"},
    {"tier": "full", "case_id": "bert", "stage": "load", "status": "error"},
]


def test_labels():
    exp = {"a": expectations.Expectation("a", "error", "known")}
    assert expectations.label("a", "pass", exp) == "IMPROVED"
    assert expectations.label("a", "error", exp) == "XFAIL"
    assert expectations.label("b", "fail", exp) == "FAIL"
    assert expectations.label("b", "pass", exp) == "PASS"
    assert expectations.label("b", "skipped", exp) == "SKIPPED"


def test_update_writes_failing_unit_cases_with_reasons(tmp_path):
    path = tmp_path / "neuron.yaml"
    summary = expectations.update_from_run(_run(tmp_path, ROWS), "neuron", path)
    assert summary["added"] == ["aten.conv.default-bbb", "aten.x.default-ccc"] and summary["removed"] == []
    data = yaml.safe_load(path.read_text())
    assert data["schema_version"] == 1 and data["backend"] == "neuron"
    assert data["expected_failures"]["aten.conv.default-bbb"] == {
        "status": "error", "reason": "RuntimeError: convolution_overrideable not implemented"}
    assert expectations.load(path)["aten.x.default-ccc"].reason == "mismatch: max_abs_err 3"


def test_check_reports_new_failures_and_improvements(tmp_path):
    path = tmp_path / "neuron.yaml"
    expectations.update_from_run(_run(tmp_path, ROWS), "neuron", path)
    later = [dict(r) for r in ROWS]
    later[1]["status"] = "pass"  # the convolution got fixed
    later[0] |= {"status": "fail", "reason": "mismatch"}  # mm regressed
    summary = expectations.check_run(_run(tmp_path, later, "run2"), "neuron", path)
    assert summary["improved"] == ["aten.conv.default-bbb"]
    assert summary["new_failures"] == ["aten.mm.default-aaa"]
    assert summary["labels"] == {"FAIL": 1, "IMPROVED": 1, "SKIPPED": 1, "XFAIL": 1}


def test_cli_update_and_check(tmp_path, capsys):
    path = tmp_path / "neuron.yaml"
    rundir = _run(tmp_path, ROWS)
    assert main(["registry", "expectations", "update", str(rundir), "--file", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["expected_failures"] == 2
    assert main(["registry", "expectations", "check", str(rundir), "--file", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"]["XFAIL"] == 2


def test_malformed_expectations_are_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("schema_version: 1\nexpected_failures:\n  x: {status: fail}\n")
    with pytest.raises(ValueError, match="needs a reason"):
        expectations.load(path)


def test_bundled_neuron_expectations_load():
    assert isinstance(expectations.load(backend="neuron"), dict)
