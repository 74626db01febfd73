"""The upstream tier's skip list: skip counts per (OpInfo, dtype) beside the tier's known failures,
which are expectation rules, rewritten and checked by the expectations' own code."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from contracts.errors import RuleFileError
from harness.cli import main
from reports import expectations, upstream_skips
from reports.expectations import Rule


def _row(op, status, reason, case="0-1", dtype="float32", variant=""):
    return {
        "tier": "upstream",
        "case_id": f"{op}/{dtype}/{case}",
        "stage": "forward",
        "status": status,
        "reason": reason,
        "error_class": "RuntimeError" if status == "error" else None,
        "message": "",
        "fallback_ops": ["aten.x.default"],
        "op": op,
        "variant": variant,
        "dtype": dtype,
    }


def _run(tmp_path, rows, name="run"):
    rundir = tmp_path / name
    rundir.mkdir()
    pd.DataFrame(rows).to_parquet(rundir / "results.parquet")
    return rundir


def test_a_runs_rows_make_skip_counts_and_expectation_rules():
    rows = [
        _row("a", "fail", "mismatch: x"),
        _row("b", "skipped", "no-native-lowering", variant="v"),
        _row("b", "pass", "", case="1-2", variant="v"),
    ]
    listed = upstream_skips.from_rows(rows, "neuron")
    assert {op: {d: c.to_dict() for d, c in ds.items()} for op, ds in listed.skips.items()} == {
        "b.v": {"float32": {"no-native-lowering": 1, "of": 2, "fallback_ops": ["aten.x.default"]}}
    }
    assert listed.expectations == (
        Rule(
            "mismatch: x",
            backend="neuron",
            tier="upstream",
            case_id="a/float32/0-1",
            stage="forward",
            status=("fail",),
        ),
    )


def test_check_labels_in_the_expectations_vocabulary(tmp_path):
    path = tmp_path / "skips.yaml"
    upstream_skips.save(
        upstream_skips.from_rows([_row("a", "fail", "mismatch: x"), _row("c", "pass", "")], "neuron"), path
    )
    later = [
        _row("a", "pass", ""),
        _row("c", "crash", "worker died"),
        _row("d", "skipped", "reference-error"),
    ]
    check = upstream_skips.check_run(_run(tmp_path, later), "neuron", path)
    assert check["labels"] == {"FAIL": 1, "IMPROVED": 1, "PASS": 1}
    assert check["new_failures"] == ["c/float32/0-1|forward"] and check["new_failures_total"] == 1
    assert check["improved"] == ["a/float32/0-1|forward"] and check["improved_total"] == 1
    # the same rules, judged by the expectations system directly, say the same
    rows = expectations.tier_rows(tmp_path / "run", "upstream")
    same = expectations.judge(rows, upstream_skips.load(path).expectations, "neuron")
    assert same["labels"] == check["labels"]
    # another backend: neuron's known failures do not apply to it
    other = upstream_skips.check_run(tmp_path / "run", "cpu", path)
    assert other["labels"] == {"FAIL": 1, "PASS": 2}


def test_check_of_a_subset_only_judges_the_groups_it_ran(tmp_path):
    path = tmp_path / "skips.yaml"
    listed = upstream_skips.from_rows(
        [_row("b", "skipped", "no-native-lowering"), _row("z", "skipped", "no-native-lowering")], "neuron"
    )
    upstream_skips.save(listed, path)
    check = upstream_skips.check_run(_run(tmp_path, [_row("b", "pass", "")]), "neuron", path)  # op b only
    assert [
        (c["op"], c["no-native-lowering_listed"], c["no-native-lowering_now"]) for c in check["skips_changed"]
    ] == [("b", 1, 0)]  # z was not run: not "changed"


def test_update_from_a_subset_keeps_the_ops_it_did_not_run(tmp_path):
    path = tmp_path / "skips.yaml"
    upstream_skips.save(
        upstream_skips.from_rows(
            [
                _row("b", "error", "op raised"),
                _row("b", "skipped", "no-native-lowering", "1-2"),
                _row("z", "error", "op raised"),
                _row("z", "skipped", "no-native-lowering", "1-2"),
            ],
            "neuron",
        ),
        path,
    )
    run = _run(tmp_path, [_row("b", "pass", ""), _row("b", "pass", "", "1-2")])
    changed = upstream_skips.update_from_run(run, "neuron", path)  # a run of op b only
    after = upstream_skips.load(path)
    assert set(after.skips) == {"z"}
    assert [(r.case_id, r.stage) for r in after.expectations] == [("z/float32/0-1", "forward")]
    assert changed["failures_removed"] == ["b/float32/0-1|forward"] and changed["groups_removed"] == [
        "b/float32"
    ]
    data = yaml.safe_load(path.read_text())
    assert data["schema_version"] == upstream_skips.SCHEMA_VERSION
    assert data["source"] == {"run": "run", "results": 2, "ops": 1}


def test_its_expectations_are_entries_of_the_expectations_file_format(tmp_path):
    """An entry of the skip list means the same in reports/data/expectations.yaml."""
    path = tmp_path / "skips.yaml"
    upstream_skips.save(upstream_skips.from_rows([_row("a", "error", "op raised")], "neuron"), path)
    entries = yaml.safe_load(path.read_text())["expectations"]
    as_expectations = tmp_path / "expectations.yaml"
    as_expectations.write_text(yaml.safe_dump({"version": 1, "expectations": entries}))
    assert expectations.load_expectations(as_expectations) == list(upstream_skips.load(path).expectations)


def test_a_typo_or_an_old_schema_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "skips.yaml"
    upstream_skips.save(upstream_skips.from_rows([_row("a", "fail", "mismatch")], "neuron"), path)
    path.write_text(path.read_text().replace("  stage: forward", "  stgae: forward"))
    with pytest.raises(RuleFileError) as info:
        upstream_skips.load(path)
    assert str(path) in str(info.value) and "entry expectations.0: unknown key 'stgae'" in str(info.value)
    run = _run(tmp_path, [_row("a", "pass", "")])
    assert main(["registry", "upstream-skips", "check", str(run), "--file", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'stgae'" in err and "Traceback" not in err
    old = tmp_path / "old.yaml"
    old.write_text("schema_version: 1\nbackend: neuron\nskips: {}\nexpected_failures: {}\n")
    with pytest.raises(RuleFileError, match="schema version 1"):
        upstream_skips.load(old)


def test_cli_update_and_check(tmp_path, capsys):
    path = tmp_path / "skips.yaml"
    run = _run(tmp_path, [_row("a", "error", "op raised"), _row("b", "skipped", "backend-unsupported")])
    assert main(["registry", "upstream-skips", "update", str(run), "--file", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["expected_failures"] == 1 and summary["groups_added"] == ["b/float32"]
    assert main(["registry", "upstream-skips", "check", str(run), "--file", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == {"PASS": 1, "XFAIL": 1}


def test_the_bundled_skip_list_loads():
    skips = upstream_skips.load(backend="neuron")
    assert skips.backend == "neuron" and skips.skips and skips.expectations
    assert {(r.backend, r.tier) for r in skips.expectations} == {("neuron", "upstream")}
