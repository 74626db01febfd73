"""harness report: one static HTML file (no server, no network) with the key numbers, and JUnit per tier."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from harness.cli import main
from tests.reports.reports_synth import set_status


def _report(run, capsys, *extra):
    assert main(["report", str(run), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_writes_html_and_junit(make_run, tmp_path, capsys):
    run = make_run()
    out = _report(run, capsys, "--baseline", str(tmp_path / "no-baseline-here"))
    assert out["report_html"] == str(run / "report.html")
    assert set(out["junit"]) == {"unit", "representative", "full"}
    assert out["baseline"] is None and out["new_failures"] is None
    full_device = next(lv for lv in out["levels"] if (lv["tier"], lv["level"]) == ("full", "on_device"))
    assert (full_device["models_reached"], full_device["models"]) == (3, 6)
    html = (run / "report.html").read_text()
    assert "3/6 (50.0%)" in html and "600/1,000 (60.0%)" in html  # on device: models and downloads
    assert "aten::foo" in html and "harness baseline update" in html
    assert main(["report", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == str(run / "report.html")


def test_html_is_self_contained(make_run, capsys):
    run = make_run()
    _report(run, capsys, "--no-baseline")
    html = (run / "report.html").read_text()
    assert "<svg" in html  # plots are inline
    fetches = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", html) + re.findall(r"url\(([^)]+)\)", html)
    assert [f for f in fetches if not f.startswith("#")] == []  # nothing to load from anywhere
    assert "@import" not in html


def test_new_failures_and_history(make_run, tmp_path, capsys):
    base = make_run("base", started_at="2026-11-27T01:00:00")
    main(["baseline", "update", str(base), "--dir", str(tmp_path / "bl")])
    run = make_run(
        "today",
        started_at="2026-11-28T01:00:00",
        edit=lambda rows: set_status(rows, "rep/bert", "forward", "error", error_class="RuntimeError"),
    )
    capsys.readouterr()
    out = _report(run, capsys, "--baseline", str(tmp_path / "bl"))
    assert out["new_failures"] == 1 and out["baseline"] == str(tmp_path / "bl")
    html = (run / "report.html").read_text()
    assert re.search(r'New failures since the baseline: <a href="#baseline" class="bad"><b>1</b>', html)
    section = html[html.index('id="new-failures-table"') :]
    assert "rep/bert" in section and "forward" in section
    assert "2 run(s) shown" in html  # base and today, the two runs under runs/


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.chromium
def test_report_in_headless_chromium(make_run, tmp_path, capsys):
    browser = _chromium()
    if not browser:
        pytest.skip("needs a headless chromium binary (apt-get install chromium); .ci/run installs it")
    run = make_run()
    _report(run, capsys, "--no-baseline")
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom",
        (run / "report.html").as_uri(),
    ]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=180).stdout
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "Coverage report: run1" in text
    assert "3/6 (50.0%)" in text  # full tier, runs fully on device, by models
    assert "600/1,000 (60.0%)" in text  # ... by downloads
    assert "5/6 (83.3%)" in text  # full tier loads
    assert "aten::foo" in text and "2/6 (33.3%)" in text  # top fallback op and the models it blocks
    assert "3/5 (60.0%)" in text  # unit tier pass rate


def test_minimal_run_meta_still_reports(tmp_path, capsys):
    from reports.tables import write_run_tables

    rows = [
        {"tier": "unit", "case_id": "u1", "stage": "op", "status": "pass"},
        {"tier": "unit", "case_id": "u2", "stage": "op", "status": "crash", "error_class": "SIGSEGV"},
    ]
    write_run_tables(tmp_path / "r", {}, rows)  # no run id, no start time, no backend
    out = _report(tmp_path / "r", capsys, "--no-baseline")
    html = (tmp_path / "r" / "report.html").read_text()
    assert out["run_ids"] == ["r"] and "1/2 (50.0%)" in html


def test_empty_run_reports(tmp_path, capsys):
    from reports.tables import write_run_tables

    write_run_tables(tmp_path / "r", {"run_id": "e", "tiers": ["full"]}, [])
    out = _report(tmp_path / "r", capsys, "--no-baseline")
    assert out["junit"] == {} and out["levels"] == []
    assert "No model tiers in this run." in (tmp_path / "r" / "report.html").read_text()


def test_report_of_missing_dir_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "no results.parquet" in capsys.readouterr().err
