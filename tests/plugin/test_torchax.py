"""The torchax adapter (adapters/torchax) through `harness check`, the unit tier and the upstream
tier: a real backend nobody here wrote plugs in with `--backend torchax`.

torchax renames PrivateUse1, which the simulator holds in this test process once any test chose
it, so each test runs the harness in a subprocess. Skips where the adapter is not installed
(`pip install -e adapters/torchax`; CI installs it)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [
    pytest.mark.torchax,
    pytest.mark.skipif(
        importlib.util.find_spec("harness_torchax") is None or importlib.util.find_spec("torchax") is None,
        reason="the torchax adapter is not installed (pip install -e adapters/torchax)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
HARNESS = str(Path(sys.executable).parent / "harness")


def _env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("NEURON_AUTOLOAD", "TORCH_DEVICE_BACKEND_AUTOLOAD")
    }
    return env | {"JAX_PLATFORMS": "cpu"}


def _harness(*args: str, cwd: Path = ROOT, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [HARNESS, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=_env()
    )


def _non_pass_blamed_with_evidence(results: pd.DataFrame) -> None:
    """Every row that did not pass is judged, by someone other than the harness, with evidence."""
    judged = results[~results["status"].isin(["pass", "not_attempted", "skipped"])]
    own = results["reason"].fillna("").str.startswith("harness error")  # the harness's code raised
    assert not own.any(), results[own][["case_id", "stage", "message"]].to_string()
    assert not (results["blame"] == "harness").any(), results[results["blame"] == "harness"][
        ["case_id", "stage", "reason", "blame_evidence"]
    ].to_string()
    assert judged["blame"].notna().all(), judged[judged["blame"].isna()][["case_id", "reason"]].to_string()
    assert judged["blame_evidence"].notna().all()


def test_import_torch_leaves_privateuse1_to_torchax_and_the_adapter_activates_it():
    code = textwrap.dedent(
        """
        import json, sys, torch
        before = torch._C._get_privateuse1_backend_name()
        from contracts.backends import get_backend
        adapter = get_backend("torchax")
        with adapter.device_scope():
            x = torch.arange(4.0, device=adapter.device) * 2
            y = x.to("cpu")
        print(json.dumps({"before": before, "after": torch._C._get_privateuse1_backend_name(),
                          "simulator": "backend" in sys.modules, "device": str(x.device),
                          "values": y.tolist(), "identity": adapter.describe()}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] == "privateuseone" and out["after"] == "jax" and out["simulator"] is False
    assert out["device"].startswith("jax") and out["values"] == [0.0, 2.0, 4.0, 6.0]
    ident = out["identity"]
    assert ident["versions"]["torchax"] == "0.0.13" and "jax" in ident["versions"]
    assert "jax_enable_x64" in ident["settings"]
    assert any("Dimname" in name for name in ident["settings"]["missing_overloads"])  # what was adapted


def test_doctor_names_the_backend_real_with_its_versions():
    proc = _harness("doctor", "--backend", "torchax", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    b = json.loads(proc.stdout)["backend"]
    assert b["kind"] == "real" and b["device"] == "jax" and b["versions"]["torchax"] == "0.0.13"


def test_check_reports_null_for_what_torchax_cannot_report_and_blames_every_failure():
    proc = _harness("check", "bert", "--backend", "torchax", "--json")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["fallback_count"] is None and result["fallback_ops"] is None
    assert result["graphs"] is None and result["recompiles"] is None
    stages = result["stages"]
    assert stages["load"]["status"] == "pass" and stages["forward"]["status"] == "pass"
    assert stages["compile"]["status"] == "not_attempted"  # no torch.compile backend declared
    assert stages["on_device"]["status"] == "not_attempted"  # no fallbacks to report
    for name, s in stages.items():
        if s["status"] in ("fail", "error", "timeout", "crash", "oom"):
            assert s["blame"] and s["blame"] != "harness", (name, s["reason"], s["blame_evidence"])
            assert s["blame_evidence"].get("why"), (name, s)


def _run_tier(tmp_path: Path, *args: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    out = tmp_path / "run"
    proc = _harness(
        "run", *args, "--backend", "torchax", "--out", str(out), "--no-progress", "--json", cwd=tmp_path
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return pd.read_parquet(out / "results.parquet"), pd.read_parquet(out / "runs.parquet")


def _identity_recorded(runs: pd.DataFrame) -> None:
    (run,) = runs.to_dict("records")
    assert run["backend"] == "torchax" and run["backend_kind"] == "real"
    assert json.loads(run["backend_versions"])["torchax"] == "0.0.13"
    assert "jax_enable_x64" in json.loads(run["backend_settings"])


def test_unit_tier_runs_every_case_with_honest_rows(tmp_path):
    results, runs = _run_tier(tmp_path, "--tier", "unit", "--limit", "40", "--workers", "1")
    assert results["case_id"].nunique() == 40  # no case lost
    assert results["fallback_count"].isna().all()  # torchax cannot report fallbacks: null, not 0
    assert (results["status"] == "pass").any()
    assert not results["reason"].fillna("").str.contains("rebuilt it wrong").any()
    _non_pass_blamed_with_evidence(results)
    _identity_recorded(runs)


def test_upstream_tier_runs_op_db_samples_with_honest_rows(tmp_path):
    results, runs = _run_tier(
        tmp_path, "--tier", "upstream", "--ops", "add,mul,softmax", "--dtypes", "float32", "--workers", "1"
    )
    assert set(results["op"].dropna()) >= {"add", "mul", "softmax"}
    assert (results["status"] == "pass").any()
    assert results["fallback_count"].isna().all()
    _non_pass_blamed_with_evidence(results)
    _identity_recorded(runs)


@pytest.mark.slow
def test_a_forward_error_on_torchax_has_a_root_cause_naming_the_op_the_error_names():
    """A model whose forward raises on torchax for an op it cannot lower: the row's root cause is
    that op (the shadow judges torchax's calls against the CPU, not against torchax)."""
    proc = _harness(
        "check", "lara_mini", "--architecture", "LaraMiniForCausalLM", "--backend", "torchax",
        "--explain", "--json",
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    row = json.loads(proc.stdout)["stages"]["forward"]
    if row["status"] == "pass":
        pytest.skip("this torchax lowers every op of the model: no error to localize")
    assert row["blame"] == "backend" and row["failing_op"], row
    rc = row["root_cause"]
    assert rc["found"] is True, rc["why"]
    assert rc["kind"] == "error" and rc["phase"] == "forward"
    assert rc["op"].startswith(row["failing_op"]), (rc["op"], row["failing_op"])
    assert rc["module_path"] and rc["source_line"]
