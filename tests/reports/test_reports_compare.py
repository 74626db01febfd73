"""harness compare: PASS / FAIL / XFAIL / IMPROVED / MISSING / FLAKY and direction-aware metrics."""

from __future__ import annotations

import json

import pytest

from contracts.status import Verdict
from harness.cli import main
from reports.compare import compare_runs
from reports.expectations import load_expectations, load_flaky
from tests.reports.reports_synth import set_status


def _verdict(result, case_id, stage):
    return next(v for v in result.verdicts if (v.case_id, v.stage) == (case_id, stage))


@pytest.fixture
def baseline(make_run):
    return make_run("base")


def test_checked_in_files_load():
    assert isinstance(load_expectations(), list) and isinstance(load_flaky(), list)


def test_same_run_has_no_new_failures(make_run, baseline):
    result = compare_runs(make_run("same"), baseline, expectations=[], flaky=[])
    assert result.counts["FAIL"] == 0 and result.counts["MISSING"] == 0 and result.exit_code == 0
    assert result.counts["PASS"] + result.counts["XFAIL"] == len(result.verdicts)
    assert _verdict(result, "rep/vit", "forward").verdict is Verdict.XFAIL  # failing in the baseline too
    assert result.metrics == []


def test_planted_regression_fails_with_nonzero_exit(make_run, baseline, capsys):
    run = make_run(
        "regressed",
        edit=lambda rows: set_status(rows, "rep/bert", "forward", "error", error_class="RuntimeError"),
    )
    result = compare_runs(run, baseline, expectations=[], flaky=[])
    v = _verdict(result, "rep/bert", "forward")
    assert v.verdict is Verdict.FAIL and (v.baseline_status, v.status) == ("pass", "error")
    assert result.counts["FAIL"] == 1 and result.exit_code == 1
    code = main(["compare", str(run), str(baseline), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["exit_code"] == 1
    assert [(r["case_id"], r["stage"]) for r in out["new_failures"]] == [("rep/bert", "forward")]
    assert out["update_command"] == f"harness baseline update {run}"


def test_planted_improvement(make_run, baseline, capsys):
    run = make_run("better", edit=lambda rows: set_status(rows, "rep/vit", "forward", "pass"))
    result = compare_runs(run, baseline, expectations=[], flaky=[])
    assert _verdict(result, "rep/vit", "forward").verdict is Verdict.IMPROVED
    assert result.counts["IMPROVED"] == 1 and result.exit_code == 0
    assert main(["compare", str(run), str(baseline)]) == 0
    text = capsys.readouterr().out
    assert "IMPROVED=1" in text and "harness baseline update" in text


def test_lost_coverage_is_a_failure(make_run, baseline):
    run = make_run(
        "lost",
        edit=lambda rows: set_status(rows, "full/a", "compile", "not_attempted", "backend cannot compile"),
    )
    v = _verdict(compare_runs(run, baseline, expectations=[], flaky=[]), "full/a", "compile")
    assert v.verdict is Verdict.FAIL and "coverage lost" in v.detail


def test_xfail_from_expectations_file(make_run, baseline, tmp_path, capsys):
    exp = tmp_path / "expectations.yaml"
    exp.write_text(
        "version: 1\nexpectations:\n  - tier: representative\n    case_id: 'rep/b*'\n"
        "    stage: forward\n    status: [error]\n    reason: 'known bug #1'\n"
    )
    run = make_run("known", edit=lambda rows: set_status(rows, "rep/bert", "forward", "error"))
    result = compare_runs(run, baseline, expectations=load_expectations(exp), flaky=[])
    v = _verdict(result, "rep/bert", "forward")
    assert v.verdict is Verdict.XFAIL and "known bug #1" in v.detail and result.exit_code == 0
    assert main(["compare", str(run), str(baseline), "--expectations", str(exp)]) == 0
    # a different failing status is not what was expected: still a new failure
    run2 = make_run("known2", edit=lambda rows: set_status(rows, "rep/bert", "forward", "crash"))
    assert (
        _verdict(
            compare_runs(run2, baseline, expectations=load_expectations(exp), flaky=[]), "rep/bert", "forward"
        ).verdict
        is Verdict.FAIL
    )
    # an expected failure that passes is an unexpected pass
    assert (
        _verdict(
            compare_runs(baseline, baseline, expectations=load_expectations(exp), flaky=[]),
            "rep/bert",
            "forward",
        ).verdict
        is Verdict.IMPROVED
    )
    capsys.readouterr()


def test_expectation_needs_a_reason(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text("expectations:\n  - case_id: x\n")
    with pytest.raises(ValueError, match="reason"):
        load_expectations(exp)


def test_flaky_from_list(make_run, baseline, tmp_path):
    flaky = tmp_path / "flaky.yaml"
    flaky.write_text("flaky:\n  - model_id: 'd'\n    stage: on_device\n    reason: races\n")
    run = make_run("flip", edit=lambda rows: set_status(rows, "full/d", "on_device", "pass"))
    result = compare_runs(run, baseline, expectations=[], flaky=load_flaky(flaky))
    v = _verdict(result, "full/d", "on_device")
    assert v.verdict is Verdict.FLAKY and "races" in v.detail
    run2 = make_run("flip2", edit=lambda rows: set_status(rows, "full/a", "on_device", "error"))
    result2 = compare_runs(run2, baseline, expectations=[], flaky=load_flaky(flaky))
    assert _verdict(result2, "full/a", "on_device").verdict is Verdict.FAIL  # not on the list


def test_missing_cases(make_run, baseline, capsys):
    run = make_run(
        "partial",
        edit=lambda rows: rows.__setitem__(slice(None), [r for r in rows if r["case_id"] != "full/a"]),
    )
    result = compare_runs(run, baseline, expectations=[], flaky=[])
    missing = result.of(Verdict.MISSING)
    assert {(v.case_id, v.stage) for v in missing} == {
        ("full/a", s) for s in ("load", "forward", "backward", "compile", "numerics", "on_device")
    }
    assert result.exit_code == 0
    assert main(["compare", str(run), str(baseline), "--strict"]) == 1
    capsys.readouterr()


def test_new_case_failing_is_a_new_failure(make_run, baseline):
    def add(rows):
        rows.append(
            {"tier": "unit", "case_id": "unit/new", "stage": "op", "status": "fail", "reason": "mismatch"}
        )

    v = _verdict(
        compare_runs(make_run("new", edit=add), baseline, expectations=[], flaky=[]), "unit/new", "op"
    )
    assert v.verdict is Verdict.FAIL and v.baseline_status is None


def test_direction_aware_metrics(make_run, baseline):
    def edit(rows):
        set_status(
            rows, "full/d", "on_device", "fail", "fallback: aten::foo", fallback_count=9
        )  # 3 -> 9: worse
        set_status(rows, "rep/gpt2", "on_device", "fail", "fallback", fallback_count=2)  # 7 -> 2: better
        set_status(rows, "rep/bert", "load", "pass", seconds=2.2)  # +10 %: below the threshold
        set_status(rows, "rep/bert", "forward", "pass", seconds=6.0)  # 3x: beyond the threshold
        set_status(rows, "rep/bert", "compile", "pass", seconds=3.5)  # +75 %: beyond 50 %, within 100 %

    result = compare_runs(make_run("metrics", edit=edit), baseline, expectations=[], flaky=[])
    got = {(m.case_id, m.stage, m.metric): (m.baseline, m.current, m.direction) for m in result.metrics}
    assert got == {
        ("full/d", "on_device", "fallback_count"): (3.0, 9.0, "worse"),
        ("rep/gpt2", "on_device", "fallback_count"): (7.0, 2.0, "better"),
        ("rep/bert", "forward", "seconds"): (2.0, 6.0, "worse"),
        ("rep/bert", "compile", "seconds"): (2.0, 3.5, "worse"),
    }
    looser = compare_runs(
        make_run("metrics2", edit=edit), baseline, expectations=[], flaky=[], time_threshold=1.0
    )
    assert {(m.stage, m.metric) for m in looser.metrics if m.case_id == "rep/bert"} == {
        ("forward", "seconds")
    }


def test_compare_bad_input_exit_2(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path / "nope2")]) == 2
    assert "no results.parquet" in capsys.readouterr().err


def test_empty_run_against_baseline_is_all_missing(make_run, baseline, tmp_path, capsys):
    from reports.tables import write_run_tables

    write_run_tables(tmp_path / "empty", {"run_id": "e"}, [])
    result = compare_runs(tmp_path / "empty", baseline, expectations=[], flaky=[])
    assert result.counts["MISSING"] == len(result.verdicts) > 0 and result.exit_code == 0
    assert compare_runs(tmp_path / "empty", tmp_path / "empty").verdicts == []
    assert main(["compare", str(tmp_path / "empty"), str(baseline), "--strict"]) == 1
    capsys.readouterr()


def test_an_expectation_for_another_backend_does_not_hide_a_new_failure(make_run, baseline, tmp_path):
    exp = tmp_path / "expectations.yaml"
    exp.write_text(
        "expectations:\n  - backend: cpu\n    case_id: 'rep/bert'\n    stage: forward\n    reason: cpu bug\n"
        "  - backend: neuron\n    case_id: 'rep/gpt2'\n    stage: forward\n    reason: neuron bug\n"
    )
    run = make_run(
        "two",
        edit=lambda rows: (
            set_status(rows, "rep/bert", "forward", "error"),
            set_status(rows, "rep/gpt2", "forward", "error"),
        ),
    )
    result = compare_runs(
        run, baseline, expectations=load_expectations(exp), flaky=[]
    )  # the run says: neuron
    assert _verdict(result, "rep/bert", "forward").verdict is Verdict.FAIL
    assert _verdict(result, "rep/gpt2", "forward").verdict is Verdict.XFAIL
