"""`harness nightly`: every tier into DIR/<tier>, the HTML report, and exit 1 on new failures."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from contracts.errors import RuleFileError
from harness.cli import main
from harness.engine.nightly import NightlyOptions, load_config, run_nightly
from tests.harness.engine.conftest import harness_cmd


def _config(tmp_path: Path, cases: str) -> str:
    path = tmp_path / "nightly.toml"
    path.write_text(
        '[quick]\ntiers = ["tests.harness.engine.trivial_tier:TIER", '
        '"tests.harness.engine.trivial_tier:CHUNKED", "no.such:TIER"]\n'
        f'["quick"."tests.harness.engine.trivial_tier:TIER"]\nmodels = "{cases}"\ntimeout = 20\n'
    )
    return str(path)


def test_nightly_runs_tiers_reports_and_flags_new_failures(tmp_path, case_file):
    from reports import baseline

    good = case_file([("a", "pass"), ("b", "pass"), ("c", "fail")], "good.json")
    first = run_nightly(
        NightlyOptions(
            out=tmp_path / "n1",
            quick=True,
            backend="cpu",
            workers=2,
            progress=False,
            config_path=_config(tmp_path, good),
            baseline=str(tmp_path / "base"),
        )
    )
    assert set(first["tiers"]) == {"trivial", "trivial_chunked", "no.such:TIER"}
    assert "error" in first["tiers"]["no.such:TIER"]  # a tier that cannot load is reported, others ran
    assert first["tiers"]["trivial"]["counts"] == {"fail": 1, "pass": 2}
    assert (
        first["tiers"]["trivial"]["run_id"] == first["tiers"]["trivial_chunked"]["run_id"] == first["run_id"]
    )
    assert Path(first["report_html"]).is_file()
    assert (tmp_path / "n1" / "trivial" / "results.parquet").is_file()

    baseline.update(tmp_path / "n1", tmp_path / "base")
    worse = case_file([("a", "pass"), ("b", "raise"), ("c", "fail")], "worse.json")
    second = run_nightly(
        NightlyOptions(
            out=tmp_path / "n2",
            quick=True,
            backend="cpu",
            workers=2,
            progress=False,
            config_path=_config(tmp_path, worse),
            baseline=str(tmp_path / "base"),
        )
    )
    assert second["new_failures"] >= 1 and second["exit_code"] == 1
    assert second["run_id"] != first["run_id"]


def test_bundled_config_has_both_modes():
    quick, full = load_config(True), load_config(False)
    assert quick.tiers == full.tiers == ("unit", "representative", "full", "upstream")
    # --quick bounds every tier: a case limit, or (upstream) a fixed subset of op_db and dtypes
    assert all(quick.tier(t).limit or (quick.tier(t).ops and quick.tier(t).dtypes) for t in quick.tiers)
    assert not full.tier("upstream").ops  # the full night runs the whole op_db


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[quick]\ntiers = ["unit"]\n[quick.unit]\nlimt = 3\n', "entry quick.unit: unknown key 'limt'"),
        ('[quick]\ntiers = ["unit"]\n[quick.unti]\nlimit = 3\n', "which `tiers` does not list"),
        ('[qiuck]\ntiers = ["unit"]\n', "entry (top level): unknown key 'qiuck'"),
        ('[full]\ntiers = ["unit"]\n', "no [quick] section"),
    ],
)
def test_a_config_with_an_unknown_key_is_a_clear_error(tmp_path, capsys, text, says):
    path = tmp_path / "nightly.toml"
    path.write_text(text)
    with pytest.raises(RuleFileError) as info:
        load_config(True, path)
    assert str(path) in str(info.value) and says in str(info.value)
    assert main(["nightly", "--quick", "--config", str(path), "--out", str(tmp_path / "n")]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_run_json_prints_one_object(tmp_path, case_file, subprocess_env):
    models = case_file([("a", "pass"), ("b", "fail")])
    proc = subprocess.run(
        harness_cmd(
            "run",
            "--tier",
            "tests.harness.engine.trivial_tier:TIER",
            "--backend",
            "cpu",
            "--models",
            models,
            "--out",
            str(tmp_path / "r"),
            "--workers",
            "1",
            "--json",
        ),
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["counts"] == {"fail": 1, "pass": 1} and out["cases"] == 2
    assert out["by_stage"]["check"] == {"fail": 1, "pass": 1}
    assert Path(out["results"]).name == "results.parquet"
    bad = subprocess.run(
        harness_cmd("run", "--tier", "nope", "--out", str(tmp_path / "x")),
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "unknown tier" in bad.stderr
