"""JUnit XML per tier: well-formed, with counts matching the statuses."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from reports.junit import write_junit
from reports.tables import read_results
from tests.reports.reports_synth import base_rows


def test_junit_per_tier_counts(make_run):
    rows = base_rows()
    rows[0]["message"] = "bad \x00 byte <b>&"  # control characters must not break the XML
    run = make_run(rows=rows)
    paths = write_junit(read_results(run), run)
    assert set(paths) == {"unit", "representative", "full"}
    for tier, path in paths.items():
        root = ET.parse(path).getroot()
        mine = [r for r in rows if r["tier"] == tier]
        assert root.tag == "testsuites"
        assert int(root.get("tests")) == len(mine) == len(root.findall(".//testcase"))
        assert (
            int(root.get("failures"))
            == sum(r["status"] == "fail" for r in mine)
            == len(root.findall(".//failure"))
        )
        assert int(root.get("errors")) == sum(
            r["status"] in ("error", "timeout", "oom", "crash") for r in mine
        )
        assert int(root.get("skipped")) == sum(r["status"] in ("skipped", "not_attempted") for r in mine)
        for suite in root.findall("testsuite"):
            assert int(suite.get("tests")) == len(suite.findall("testcase"))
    full = ET.parse(paths["full"]).getroot()
    err = full.find(".//testcase[@name='full/g']/error")
    assert err.get("type") == "timeout" and "timeout after 60 s" in err.get("message")
    skipped = (
        ET.parse(paths["representative"])
        .getroot()
        .find(".//testsuite[@name='representative.backward']/testcase[@name='rep/gpt2']/skipped")
    )
    assert skipped.get("message") == "skipped: no loss"
