"""Regressions that cannot hide: a changed failure is FAIL, a fallback regression is its own verdict;
both gate `harness compare` (exit code 1) and the nightly."""

from __future__ import annotations

import json

from contracts.status import REGRESSION_VERDICTS, Verdict
from harness.cli import main
from reports.compare import Rule, compare_runs
from tests.reports.reports_synth import set_status


def _verdict(result, case_id, stage):
    return next(v for v in result.verdicts if (v.case_id, v.stage) == (case_id, stage))


def test_regression_verdicts_are_in_the_vocabulary():
    assert Verdict.FALLBACK_REGRESSION in REGRESSION_VERDICTS and Verdict.FAIL in REGRESSION_VERDICTS
    assert Verdict.XFAIL not in REGRESSION_VERDICTS


def test_a_failure_with_another_error_class_is_a_changed_failure_that_gates(make_run, capsys):
    base = make_run("base")  # rep/vit forward: error RuntimeError
    run = make_run(
        "run", edit=lambda rows: set_status(rows, "rep/vit", "forward", "error", error_class="KeyError")
    )
    result = compare_runs(run, base, expectations=[], flaky=[])
    v = _verdict(result, "rep/vit", "forward")
    assert v.verdict is Verdict.FAIL
    assert v.detail == "changed failure: error RuntimeError -> error KeyError"
    assert result.exit_code == 1
    assert main(["compare", str(run), str(base), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [(r["case_id"], r["detail"]) for r in out["new_failures"]] == [("rep/vit", v.detail)]


def test_a_failure_in_another_op_is_a_changed_failure(make_run):
    base = make_run(
        "base",
        edit=lambda rows: set_status(
            rows, "rep/vit", "forward", "error", error_class="RuntimeError", failing_op="aten.gelu.default"
        ),
    )
    run = make_run(
        "run",
        edit=lambda rows: set_status(
            rows, "rep/vit", "forward", "error", error_class="RuntimeError", failing_op="aten.mm.default"
        ),
    )
    v = _verdict(compare_runs(run, base, expectations=[], flaky=[]), "rep/vit", "forward")
    assert (
        v.verdict is Verdict.FAIL
        and "in aten.gelu.default -> error RuntimeError in aten.mm.default" in v.detail
    )


def test_the_same_failure_stays_known_and_an_unknown_op_is_no_change(make_run):
    base = make_run("base")
    same = compare_runs(make_run("same"), base, expectations=[], flaky=[])
    assert _verdict(same, "rep/vit", "forward").verdict is Verdict.XFAIL
    run = make_run(
        "op-now-known",
        edit=lambda rows: set_status(
            rows, "rep/vit", "forward", "error", error_class="RuntimeError", failing_op="aten.mm"
        ),
    )
    v = _verdict(compare_runs(run, base, expectations=[], flaky=[]), "rep/vit", "forward")
    assert v.verdict is Verdict.XFAIL  # the baseline did not know its op: nothing to compare


def test_an_expected_failure_stays_xfail_when_it_changes(make_run):
    base = make_run("base")
    run = make_run(
        "run", edit=lambda rows: set_status(rows, "rep/vit", "forward", "error", error_class="KeyError")
    )
    rules = [Rule(reason="vit is known broken", case_id="rep/vit", stage="forward")]
    assert (
        _verdict(compare_runs(run, base, expectations=rules, flaky=[]), "rep/vit", "forward").verdict
        is Verdict.XFAIL
    )


def _fallbacks(case_id, count, ops):
    def edit(rows):
        for r in rows:
            if r["case_id"] == case_id and r["stage"] == "on_device":
                r.update(fallback_count=count, fallback_ops=list(ops))

    return edit


def test_a_new_fallback_op_behind_an_old_failure_is_a_regression_that_gates(make_run, capsys):
    base = make_run("base")  # rep/gpt2 on_device: fail, 7 x aten::_cdist_forward
    run = make_run("run", edit=_fallbacks("rep/gpt2", 7, ["aten::_cdist_forward", "aten::nonzero"]))
    result = compare_runs(run, base, expectations=[], flaky=[])
    v = _verdict(result, "rep/gpt2", "on_device")
    assert v.verdict is Verdict.FALLBACK_REGRESSION and v.detail.startswith("new fallback ops: aten::nonzero")
    assert result.counts["FALLBACK_REGRESSION"] == 1 and result.counts["FAIL"] == 0 and result.exit_code == 1
    assert main(["compare", str(run), str(base), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [r["case_id"] for r in out["fallback_regressions"]] == ["rep/gpt2"]
    assert [r["case_id"] for r in out["gated"]] == ["rep/gpt2"]
    assert main(["compare", str(run), str(base)]) == 1
    assert "FALLBACK_REGRESSION rep" in capsys.readouterr().out.replace("  ", " ")


def test_a_higher_fallback_count_is_a_regression(make_run):
    base = make_run("base")
    result = compare_runs(
        make_run("run", edit=_fallbacks("rep/gpt2", 9, ["aten::_cdist_forward"])),
        base,
        expectations=[],
        flaky=[],
    )
    v = _verdict(result, "rep/gpt2", "on_device")
    assert v.verdict is Verdict.FALLBACK_REGRESSION and v.detail.startswith("fallback count 7 -> 9")
    fewer = compare_runs(
        make_run("fewer", edit=_fallbacks("rep/gpt2", 5, ["aten::_cdist_forward"])),
        base,
        expectations=[],
        flaky=[],
    )
    assert _verdict(fewer, "rep/gpt2", "on_device").verdict is Verdict.XFAIL and fewer.exit_code == 0


def test_a_passing_row_that_gains_fallbacks_is_a_regression(make_run):
    def edit(rows):  # the full tier has no on_device row of its own: totals ride on a passing row
        for r in rows:
            if r["case_id"] == "full/a" and r["stage"] == "backward":
                r.update(fallback_count=2, fallback_ops=["aten::nonzero"])

    v = _verdict(
        compare_runs(make_run("run", edit=edit), make_run("base"), expectations=[], flaky=[]),
        "full/a",
        "backward",
    )
    assert v.verdict is Verdict.FALLBACK_REGRESSION and "fallback count 0 -> 2" in v.detail


def test_a_case_that_now_runs_further_is_improved_not_a_fallback_regression(make_run):
    def edit(rows):
        set_status(rows, "rep/vit", "forward", "pass")
        for r in rows:
            if r["case_id"] == "rep/vit" and r["stage"] == "forward":
                r.update(fallback_count=4, fallback_ops=["aten::nonzero"])

    v = _verdict(
        compare_runs(make_run("run", edit=edit), make_run("base"), expectations=[], flaky=[]),
        "rep/vit",
        "forward",
    )
    assert v.verdict is Verdict.IMPROVED


def test_a_fallback_regression_gates_whatever_the_rows_blame(make_run):
    from reports.gate import gated

    def blamed(rows):  # the same old failure, blamed on the harness both days
        set_status(rows, "rep/vit", "forward", "error", error_class="RuntimeError", blame="harness")

    def more(rows):
        blamed(rows)
        for r in rows:
            if r["case_id"] == "rep/vit" and r["stage"] == "forward":
                r.update(fallback_count=3, fallback_ops=["aten::nonzero"])

    result = compare_runs(
        make_run("run", edit=more), make_run("base", edit=blamed), expectations=[], flaky=[]
    )
    v = _verdict(result, "rep/vit", "forward")
    assert v.verdict is Verdict.FALLBACK_REGRESSION and v.blame == "harness"
    assert v in gated(result, "backend") and result.exit_code == 1
