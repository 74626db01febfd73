"""Reports split every non-pass by blame, lead with the backend's, and compare gates on the backend's."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from harness.cli import main
from reports.compare import compare_runs
from reports.coverage import summarize
from reports.html import write_report
from reports.junit import write_junit
from reports.tables import read_results
from tests.reports.reports_synth import base_rows, set_status


def _blamed_rows():
    rows = base_rows()
    for r in rows:
        if r["status"] not in ("pass", "skipped"):
            r["blame"] = "harness"
    for r in rows:  # a device failure, a transformers failure, a missing package
        if r["case_id"] == "rep/vit" and r["status"] != "pass":
            r["blame"] = "backend"
        if r["case_id"] == "rep/t5" and r["status"] != "pass":
            r["blame"] = "upstream"
        if r["case_id"] == "full/d" and r["stage"] == "on_device":
            r["blame"] = "backend"
        if r["case_id"] == "full/g" and r["status"] != "pass":
            r["blame"] = "environment"
    return rows


@pytest.fixture
def blamed_run(make_run):
    return make_run("blamed", rows=_blamed_rows())


def test_coverage_splits_non_passes_by_blame_and_keeps_denominators(blamed_run):
    cov = summarize(read_results(blamed_run))
    fwd = next(s for s in cov.stages if (s.tier, s.stage) == ("representative", "forward"))
    assert fwd.cases == 4 and fwd.by_blame["backend"] == 1 and fwd.by_blame["upstream"] == 1
    computes = next(lv for lv in cov.levels if (lv.tier, lv.level) == ("representative", "computes"))
    assert computes.models == 4 and computes.not_reached_by_blame["upstream"] == 1
    assert computes.models_attributable == 3 and computes.fmt_attributable() == "2/3 (66.7%)"
    full = next(lv for lv in cov.levels if (lv.tier, lv.level) == ("full", "loads"))
    assert full.not_reached_by_blame["environment"] == 1 and full.models_attributable == 5
    on_device = next(lv for lv in cov.levels if (lv.tier, lv.level) == ("full", "on_device"))
    assert on_device.not_reached_by_blame["backend"] == 2  # full/d's two models: a fallback is the device's
    # the report leads with the backend's failures, most models first
    assert [(f["case_id"], f["stage"]) for f in cov.backend_failures][:2] == [
        ("full/d", "on_device"),
        ("rep/vit", "forward"),
    ]
    assert all(f["status"] != "not_attempted" for f in cov.backend_failures)
    keys = {(r["tier"], r["stage"], r["blame"]) for r in cov.failures_by_blame}
    assert ("unit", "op", "harness") in keys and ("representative", "load", "upstream") in keys


def test_junit_carries_the_blame_and_lists_the_backends_first(blamed_run, tmp_path):
    paths = write_junit(read_results(blamed_run), tmp_path)
    root = ET.parse(paths["representative"]).getroot()
    forward = next(s for s in root if s.get("name") == "representative.forward")
    cases = list(forward)
    assert cases[0].get("name") == "rep/vit"  # the backend's failure leads its suite
    prop = cases[0].find("properties/property")
    assert prop.get("name") == "blame" and prop.get("value") == "backend"
    assert cases[0].find("error").get("message").startswith("[blame: backend]")


def test_html_leads_with_backend_failures_and_splits_by_blame(blamed_run):
    html = write_report(blamed_run).read_text()
    first = html[html.index('id="summary"') : html.index("</section>")]
    assert html.index("</section>") < html.index('id="runs"') < html.index('id="levels"')
    assert 'id="unexplained-table"' in first and "rep/vit" in first  # the backend's failure leads
    assert "rep/t5" not in first  # transformers' own failure is counted, not listed, on the first screen
    assert 'id="backend-failures-table"' in html and 'id="blame-table"' in html
    assert "not upstream/environment" in html


def _regress(rows, case_id, stage, blame):
    set_status(rows, case_id, stage, "error", error_class="RuntimeError")
    for r in rows:
        if (r["case_id"], r["stage"]) == (case_id, stage):
            r["blame"] = blame


def test_compare_gates_on_backend_regressions_and_lists_the_harness_debt(make_run, capsys):
    baseline = make_run("base")
    harness_only = make_run("h", edit=lambda rows: _regress(rows, "rep/bert", "forward", "harness"))
    result = compare_runs(harness_only, baseline, expectations=[], flaky=[])
    assert result.counts["FAIL"] == 1 and result.exit_code == 0  # the harness' own debt does not gate
    out = result.to_dict()
    assert out["gate"] == "backend" and out["gated"] == []
    assert [r["case_id"] for r in out["harness_debt"]] == ["rep/bert"]
    assert compare_runs(harness_only, baseline, expectations=[], flaky=[], gate="all").exit_code == 1
    assert main(["compare", str(harness_only), str(baseline)]) == 0
    text = capsys.readouterr().out
    assert "its own debt" in text and "rep/bert" in text
    assert main(["compare", str(harness_only), str(baseline), "--gate", "all", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["gated"][0]["blame"] == "harness"

    device = make_run("d", edit=lambda rows: _regress(rows, "rep/bert", "forward", "backend"))
    result = compare_runs(device, baseline, expectations=[], flaky=[])
    assert result.exit_code == 1 and [v.case_id for v in result.of(result.verdicts[0].verdict.FAIL)] == [
        "rep/bert"
    ]
    # not judged (a run from before blame): it gates, not knowing whose it is must not let it through
    unjudged = make_run("u", edit=lambda rows: _regress(rows, "rep/bert", "forward", None))
    assert compare_runs(unjudged, baseline, expectations=[], flaky=[]).exit_code == 1
    upstream = make_run("up", edit=lambda rows: _regress(rows, "rep/bert", "forward", "upstream"))
    res = compare_runs(upstream, baseline, expectations=[], flaky=[])
    assert res.exit_code == 0 and [r["case_id"] for r in res.to_dict()["upstream"]] == ["rep/bert"]
