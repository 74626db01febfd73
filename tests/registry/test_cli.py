"""`harness registry ...`: import/export, regenerate with a diff, export-tests that run standalone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from registry.store import Registry


@pytest.mark.shared_data
def test_import_json_counts_lines_cases_unreplayable(oplog_path, tmp_path, capsys):
    out = tmp_path / "gpt2.parquet"
    assert (
        main(
            ["registry", "import", str(oplog_path), "--format", "pytorch-oplog", "--out", str(out), "--json"]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["lines"] == data["cases"] + data["unreplayable"] and data["lines"] > 0
    assert len(Registry.load(out)) == data["signatures"]


def test_import_missing_file_is_exit_2(tmp_path, capsys):
    assert main(["registry", "import", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "o.parquet")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_export_writes_the_oplog_format(bert_registry, tmp_path):
    reg = bert_registry.save(tmp_path / "r.parquet")
    out = tmp_path / "r.txt"
    assert main(["registry", "export", str(reg), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("Operator: aten.") and "cnt: " in text and "T([" in text


def test_regenerate_records_models_from_a_file_and_prints_the_diff(tmp_path, capsys):
    models = tmp_path / "models.yaml"
    models.write_text(
        yaml.safe_dump(
            [{"model_id": "t/bert", "model_type": "bert", "architecture": "BertForMaskedLM", "downloads": 42}]
        )
    )
    out = tmp_path / "reg.parquet"
    args = [
        "registry",
        "regenerate",
        "--models",
        str(models),
        "--out",
        str(out),
        "--seq",
        "8",
        "--workers",
        "1",
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["recorded_models"] == 1 and first["signatures"] == len(Registry.load(out)) > 50
    assert (
        first["diff"]["signatures_added"] == first["signatures"]
        and "aten.addmm.default" in first["diff"]["ops_added"]
    )
    assert all(e.weight == 42 for e in Registry.load(out))
    assert main(args) == 0  # same models again: nothing changed
    second = json.loads(capsys.readouterr().out)
    assert second["diff"] == {
        "signatures_added": 0,
        "signatures_removed": 0,
        "ops_added": [],
        "ops_removed": [],
    }


def test_regenerate_rejects_a_bad_models_file(tmp_path, capsys):
    bad = tmp_path / "m.json"
    bad.write_text('[{"model_id": "x"}]')
    assert main(["registry", "regenerate", "--models", str(bad), "--out", str(tmp_path / "o.parquet")]) == 2
    assert "entry 0: missing key 'model_type'" in capsys.readouterr().err
    typo = tmp_path / "m.yaml"  # a misspelt field is an error, not a model built from the type's default
    typo.write_text("- {model_type: bert, architecure: BertForMaskedLM}\n")
    assert main(["registry", "regenerate", "--models", str(typo), "--out", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"{typo}: entry 0: unknown key 'architecure'" in err and "Traceback" not in err


def test_export_tests_writes_standalone_files_that_pass(bert_registry, tmp_path, capsys):
    reg = bert_registry.save(tmp_path / "r.parquet")
    out = tmp_path / "repro"
    assert (
        main(
            [
                "registry",
                "export-tests",
                str(out),
                "--op",
                "aten.embedding.default",
                "--op",
                "aten.addmm.default",
                "--registry",
                str(reg),
                "--backend",
                "cpu",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["ops"] == 2 and len(data["files"]) == 2
    text = (out / "test_aten_embedding_default.py").read_text()
    assert "import registry" not in text and "import harness" not in text  # standalone: torch only
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-o",
            "addopts=",
            "--rootdir",
            str(out),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"{data['cases']} passed" in proc.stdout


def test_exported_tests_fail_not_skip_when_the_device_cannot_be_used(bert_registry, tmp_path, capsys):
    reg = bert_registry.save(tmp_path / "r.parquet")
    out = tmp_path / "repro"
    assert (
        main(
            [
                "registry",
                "export-tests",
                str(out),
                "--op",
                "aten.addmm.default",
                "--registry",
                str(reg),
                "--backend",
                "cpu",
                "--json",
            ]
        )
        == 0
    )
    cases = json.loads(capsys.readouterr().out)["cases"]
    env = {**os.environ, "REPRO_DEVICE": "no_such_device_xyz"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-o",
            "addopts=",
            "--rootdir",
            str(out),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert f"{cases} failed" in proc.stdout and "skipped" not in proc.stdout
    assert "no_such_device_xyz" in proc.stdout


def test_the_unit_tier_suite_fails_not_skips_when_the_backend_cannot_be_imported(tmp_path):
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "HARNESS_BACKEND": "no_such_backend_module_xyz:dev",
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")]),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-o",
            "addopts=",
            str(root / "tests" / "unit_tier"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=root,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 failed" in proc.stdout and "skipped" not in proc.stdout
    assert "no_such_backend_module_xyz" in proc.stdout
