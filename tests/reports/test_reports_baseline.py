"""harness baseline update: where the baseline lives and how a run (or a nightly dir) becomes it."""

from __future__ import annotations

import json

from harness.cli import main
from reports.baseline import MARKER, baseline_dir
from reports.tables import read_results, read_table
from tests.reports.reports_synth import base_rows


def test_update_into_env_dir_and_compare_by_default(make_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_BASELINE_DIR", str(tmp_path / "bl"))
    assert baseline_dir() == tmp_path / "bl"
    run = make_run("r1")
    assert main(["baseline", "update", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["baseline"] == str((tmp_path / "bl").resolve()) and out["run_ids"] == ["r1"]
    assert json.loads((tmp_path / "bl" / MARKER).read_text())["run_ids"] == ["r1"]
    assert len(read_results(tmp_path / "bl")) == len(base_rows())
    assert main(["compare", str(make_run("r2"))]) == 0  # BASELINE omitted: the env dir
    capsys.readouterr()


def test_update_replaces_previous_baseline(make_run, tmp_path, capsys):
    dest = tmp_path / "bl"
    main(["baseline", "update", str(make_run("r1")), "--dir", str(dest)])
    small = make_run("r2", rows=base_rows()[:6])
    assert main(["baseline", "update", str(small), "--dir", str(dest)]) == 0
    assert len(read_results(dest)) == 6 and read_table(dest, "runs")["run_id"].tolist() == ["r2"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp dirs left
    capsys.readouterr()


def test_default_is_cwd_baseline(monkeypatch, tmp_path):
    monkeypatch.delenv("HARNESS_BASELINE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert baseline_dir() == tmp_path / "baseline"


def test_nightly_dir_becomes_one_baseline(make_run, tmp_path, capsys):
    rows = base_rows()
    night = tmp_path / "night"
    for tier in ("unit", "representative", "full"):
        make_run(tier, rows=[r for r in rows if r["tier"] == tier], run_id=f"n-{tier}", parent=night)
    dest = tmp_path / "bl"
    assert main(["baseline", "update", str(night), "--dir", str(dest)]) == 0
    assert len(read_results(dest)) == len(rows)
    assert sorted(read_table(dest, "runs")["run_id"]) == ["n-full", "n-representative", "n-unit"]
    capsys.readouterr()


def test_update_from_nothing_is_a_clear_error(tmp_path, capsys):
    assert main(["baseline", "update", str(tmp_path / "missing"), "--dir", str(tmp_path / "bl")]) == 2
    assert "no results.parquet" in capsys.readouterr().err
    assert not (tmp_path / "bl").exists()
