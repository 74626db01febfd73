"""Expectations: one file of known failures for every tier, keyed by backend; rewritten from a run."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from contracts.errors import RuleFileError
from contracts.status import Verdict
from harness.cli import main
from reports import expectations
from reports.expectations import Index, Rule
from reports.verdicts import verdict_of


def _run(tmp_path, rows, name="run"):
    rundir = tmp_path / name
    rundir.mkdir()
    cols = {
        k: [r.get(k, "") for r in rows]
        for k in ("run_id", "tier", "case_id", "stage", "status", "error_class", "message", "reason")
    }
    pq.write_table(pa.table(cols), rundir / "results.parquet")
    return rundir


ROWS = [
    {"tier": "unit", "case_id": "aten.mm.default-aaa", "stage": "op", "status": "pass"},
    {
        "tier": "unit",
        "case_id": "aten.conv.default-bbb",
        "stage": "op",
        "status": "error",
        "error_class": "RuntimeError",
        "message": "convolution_overrideable not implemented",
    },
    {
        "tier": "unit",
        "case_id": "aten.x.default-ccc",
        "stage": "op",
        "status": "fail",
        "reason": "mismatch: max_abs_err 3",
    },
    {
        "tier": "unit",
        "case_id": "aten.y.default-ddd",
        "stage": "op",
        "status": "skipped",
        "reason": "unreplayable",
    },
    {"tier": "full", "case_id": "bert", "stage": "load", "status": "error"},
]


def test_one_verdict_vocabulary_against_expectations_alone():
    known = [Rule("known", case_id="a", status=("error",))]
    assert verdict_of("pass", None, known, None)[0] is Verdict.IMPROVED
    assert verdict_of("error", None, known, None)[0] is Verdict.XFAIL
    assert verdict_of("fail", None, known, None)[0] is Verdict.FAIL  # expected error, got a wrong answer
    assert verdict_of("fail", None, [], None)[0] is Verdict.FAIL
    assert verdict_of("pass", None, [], None)[0] is Verdict.PASS
    assert verdict_of("skipped", None, [], None)[0] is Verdict.PASS  # not a failure: nothing to fail against


def test_rules_are_keyed_by_backend():
    rules = [
        Rule("neuron only", backend="neuron", case_id="c"),
        Rule("everywhere", case_id="d"),
        Rule("neuron-*", backend="neuron-*", case_id="e"),
    ]
    on_neuron = Index(rules, "neuron")
    assert [r.reason for r in on_neuron.matching("unit", "c", "op")] == ["neuron only"]
    assert on_neuron.matching("unit", "e", "op") == []
    assert Index(rules, "cpu").matching("unit", "c", "op") == []
    assert [r.reason for r in Index(rules, "cpu").matching("unit", "d", "op")] == ["everywhere"]
    assert [r.reason for r in Index(rules, "neuron-v2").matching("unit", "e", "op")] == ["neuron-*"]
    assert Index(rules, None).matching("unit", "c", "op") == []  # unknown backend: only rules for all


def test_update_writes_failing_unit_cases_with_reasons_and_keeps_other_rules(tmp_path):
    path = tmp_path / "expectations.yaml"
    path.write_text(
        "version: 1\nexpectations:\n  - tier: full\n    case_id: 'bert*'\n    reason: 'hand-written'\n"
        "  - backend: cpu\n    tier: unit\n    case_id: aten.z.default-zzz\n    reason: other backend\n"
    )
    summary = expectations.update_from_run(_run(tmp_path, ROWS), "neuron", path)
    assert summary["added"] == ["aten.conv.default-bbb", "aten.x.default-ccc"] and summary["removed"] == []
    data = yaml.safe_load(path.read_text())
    assert data["version"] == 1
    by_case = {e["case_id"]: e for e in data["expectations"]}
    assert by_case["aten.conv.default-bbb"] == {
        "backend": "neuron",
        "tier": "unit",
        "case_id": "aten.conv.default-bbb",
        "stage": "op",
        "status": ["error"],
        "reason": "RuntimeError: convolution_overrideable not implemented",
    }
    assert by_case["bert*"]["reason"] == "hand-written" and by_case["aten.z.default-zzz"]["backend"] == "cpu"
    loaded = {r.case_id: r for r in expectations.load_expectations(path)}
    assert loaded["aten.x.default-ccc"].reason == "mismatch: max_abs_err 3"
    # a second update from a run where conv passes removes only neuron's unit rule for it
    later = [dict(r) for r in ROWS]
    later[1]["status"] = "pass"
    again = expectations.update_from_run(_run(tmp_path, later, "run2"), "neuron", path)
    assert again["removed"] == ["aten.conv.default-bbb"] and again["added"] == []
    assert {r.case_id for r in expectations.load_expectations(path)} == {
        "bert*",
        "aten.z.default-zzz",
        "aten.x.default-ccc",
    }


def test_check_reports_new_failures_and_improvements(tmp_path):
    path = tmp_path / "expectations.yaml"
    expectations.update_from_run(_run(tmp_path, ROWS), "neuron", path)
    later = [dict(r) for r in ROWS]
    later[1]["status"] = "pass"  # the convolution got fixed
    later[0] |= {"status": "fail", "reason": "mismatch"}  # mm regressed
    summary = expectations.check_run(_run(tmp_path, later, "run2"), "neuron", path)
    assert summary["improved"] == ["aten.conv.default-bbb"]
    assert summary["new_failures"] == ["aten.mm.default-aaa"]
    assert summary["labels"] == {"FAIL": 1, "IMPROVED": 1, "PASS": 1, "XFAIL": 1}
    # the same run on another backend: neuron's rules do not apply
    other = expectations.check_run(_run(tmp_path, later, "run3"), "cpu", path)
    assert other["labels"] == {"FAIL": 2, "PASS": 2}


def test_cli_update_and_check(tmp_path, capsys):
    path = tmp_path / "expectations.yaml"
    rundir = _run(tmp_path, ROWS)
    assert main(["registry", "expectations", "update", str(rundir), "--file", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["expected_failures"] == 2
    assert main(["registry", "expectations", "check", str(rundir), "--file", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"]["XFAIL"] == 2


def test_malformed_expectations_are_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nexpectations:\n  - case_id: x\n    status: [fail]\n")
    with pytest.raises(RuleFileError, match=r"entry expectations\.0: missing key 'reason'"):
        expectations.load_expectations(path)
    path.write_text("expectations:\n  - case_id: x\n    reason: ''\n")
    with pytest.raises(RuleFileError, match=r"entry expectations\.0: key 'reason'"):
        expectations.load_expectations(path)
    path.write_text("expectations:\n  - case_id: x\n    status: [broken]\n    reason: r\n")
    with pytest.raises(RuleFileError, match="unknown status"):
        expectations.load_expectations(path)


def test_an_unknown_key_in_a_users_file_is_a_clear_cli_error(tmp_path, monkeypatch, capsys):
    """A typo (`stgae`) must not make a rule that silently matches every stage."""
    path = tmp_path / "mine.yaml"
    path.write_text("version: 1\nexpectations:\n  - case_id: x\n    stgae: op\n    reason: r\n")
    with pytest.raises(RuleFileError) as info:
        expectations.load_expectations(path)
    assert str(path) in str(info.value) and "entry expectations.0: unknown key 'stgae'" in str(info.value)
    rundir = _run(tmp_path, ROWS)
    assert main(["registry", "expectations", "check", str(rundir), "--file", str(path)]) == 2
    monkeypatch.setenv("HARNESS_EXPECTATIONS", str(path))
    assert main(["compare", str(rundir), str(rundir)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'stgae'" in err and "Traceback" not in err
    flaky = tmp_path / "flaky.yaml"
    flaky.write_text("flaky:\n  - case_id: x\n    reasn: typo\n")
    with pytest.raises(RuleFileError, match=r"entry flaky\.0: unknown key 'reasn'"):
        expectations.load_flaky(flaky)


def test_bundled_expectations_load_and_env_overrides(tmp_path, monkeypatch):
    assert isinstance(expectations.load_expectations(), list)
    path = tmp_path / "mine.yaml"
    path.write_text("expectations:\n  - case_id: x\n    reason: mine\n")
    monkeypatch.setenv("HARNESS_EXPECTATIONS", str(path))
    assert [r.reason for r in expectations.load_expectations()] == ["mine"]
