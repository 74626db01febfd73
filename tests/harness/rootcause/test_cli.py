"""End to end: a faulted run's rows carry the root cause, `harness explain` prints it and writes
the repro, `harness registry add-repros` keeps it, and the unit tier alone then catches the bug;
`harness check --explain`; explain localizes by hand a row a run did not localize."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.cli import main

ROOT = Path(__file__).resolve().parents[3]
TIER = "tests.harness.rootcause.model_tier:TIER"
CASE = "catalog/bert"
GELU = {"name": "gelu-1pct", "op": "aten.gelu.default", "kind": "perturb", "rel": 0.01}

pytestmark = pytest.mark.slow


def _env(fault_file: Path | None, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }
    env.pop("NEURON_FAULTS", None)
    if fault_file is not None:
        env["NEURON_FAULTS"] = str(fault_file)
    return env


def _run(out: Path, tier: str, env: dict[str, str], *extra: str) -> None:
    cmd = [sys.executable, "-m", "harness", "run", "--tier", tier, "--out", str(out), "--backend", "neuron"]
    proc = subprocess.run(
        [*cmd, "--workers", "1", "--no-progress", "--json", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]


@pytest.fixture(scope="module")
def fault_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "gelu.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "faults": [GELU]}))
    return path


@pytest.fixture(scope="module")
def faulted_run(tmp_path_factory, fault_file):
    out = tmp_path_factory.mktemp("runs") / "faulted"
    _run(out, TIER, _env(fault_file))
    return out


def test_a_faulted_runs_rows_carry_the_root_cause_and_explain_prints_it(faulted_run, capsys):
    rows = pd.read_parquet(faulted_run / "results.parquet")
    numerics = rows[rows["stage"] == "numerics"].iloc[0]
    assert numerics["status"] == "fail" and numerics["blame"] == "backend"
    assert numerics["root_cause_op"] == "aten.gelu.default"  # queryable without parsing JSON
    record = json.loads(numerics["root_cause"])
    assert record["repro_verified"] is True and record["route"] == "eager_shadow"
    assert rows[rows["stage"] != "numerics"]["root_cause"].isna().all()

    assert main(["explain", str(faulted_run)]) == 0
    text = capsys.readouterr().out
    assert "root cause: aten.gelu.default (mismatch, forward call" in text and "verified" in text
    assert main(["explain", str(faulted_run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"] == {"rows": 1, "found": 1, "verified": 1, "not_found": 0, "not_localized": 0}
    (row,) = data["rows"]
    assert row["case_id"] == CASE and row["root_cause"]["op"] == "aten.gelu.default"
    assert (faulted_run / row["root_cause"]["repro"]["path"]).is_file()


def test_add_repros_keeps_the_root_cause_and_the_unit_tier_alone_then_catches_the_bug(
    faulted_run, fault_file, tmp_path, capsys
):
    registry = tmp_path / "ops.parquet"
    assert main(["registry", "add-repros", str(faulted_run), "--registry", str(registry), "--json"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert len(added["added"]) == 1 and added["ops"] == ["aten.gelu.default"] and added["left_out"] == []
    assert main(["registry", "add-repros", str(faulted_run), "--registry", str(registry), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["added"] == [] and again["already_there"] == added["added"]  # merged once

    faulted, clean = tmp_path / "unit-faulted", tmp_path / "unit-clean"
    _run(faulted, "unit", _env(fault_file), "--registry", str(registry))
    _run(clean, "unit", _env(None), "--registry", str(registry))
    bad = pd.read_parquet(faulted / "results.parquet")
    good = pd.read_parquet(clean / "results.parquet")
    assert list(bad["case_id"]) == added["added"] and list(bad["status"]) == ["fail"]
    assert list(good["status"]) == ["pass"]


def test_explain_localizes_by_hand_a_row_the_run_did_not(fault_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "unlocalized"
    _run(out, TIER, _env(fault_file, HARNESS_ROOT_CAUSE="off"))
    assert main(["explain", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["not_localized"] == 1

    from backend import faults

    monkeypatch.setenv("NEURON_FAULTS", str(fault_file))
    faults.load(fault_file)
    try:
        assert main(["explain", str(out), "--case", CASE, "--json"]) == 0
    finally:
        faults.clear()
    data = json.loads(capsys.readouterr().out)
    (row,) = data["rows"]
    rc = row["root_cause"]
    assert (
        rc["found"] and rc["op"] == "aten.gelu.default" and rc["extra"]["localized_by"] == "harness explain"
    )


def test_check_explain_prints_the_root_cause_and_writes_its_repro(fault_file, tmp_path, capsys, monkeypatch):
    from backend import faults

    monkeypatch.setenv("NEURON_FAULTS", str(fault_file))
    faults.load(fault_file)
    try:
        argv = ["check", "bert", "--architecture", "BertForMaskedLM", "--stages", "numerics"]
        assert main([*argv, "--explain", "--repro-dir", str(tmp_path / "repros")]) == 1
    finally:
        faults.clear()
    text = capsys.readouterr().out
    assert "numerics:\n  root cause: aten.gelu.default" in text
    (written,) = (tmp_path / "repros").glob("test_aten_gelu_default_*.py")
    assert f"written:  {written}" in text
