"""A run records what was tested: the backend's kind, versions and settings (its adapter's
describe()) in runs.parquet, and the report header shows them; null when no worker said."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from contracts import backends
from reports.html import write_report
from reports.tables import write_run_tables

ROW = {"tier": "unit", "case_id": "aten.add.Tensor-1", "stage": "op", "status": "pass"}


def _adapter() -> backends.TorchDeviceBackend:
    return backends.TorchDeviceBackend("mydev", "cpu", simulated=None, activation_name="mypkg.enable")


def test_identity_of_an_adapter_names_kind_versions_and_settings():
    ident = backends.identity(_adapter())
    assert ident["backend_kind"] == "unknown"  # simulated None: never called real
    assert ident["backend_versions"]["torch"] and ident["backend_settings"] == {"activation": "mypkg.enable"}


def test_runs_parquet_and_the_report_header_record_the_backend_identity(tmp_path):
    ident = backends.identity(_adapter())
    meta = {"run_id": "r1", "backend": "mydev", **{k: v for k, v in ident.items() if k != "backend_name"}}
    write_run_tables(tmp_path, meta, [ROW])
    (run,) = pq.read_table(tmp_path / "runs.parquet").to_pylist()
    assert run["backend_kind"] == "unknown"
    assert json.loads(run["backend_versions"]) == ident["backend_versions"]
    assert json.loads(run["backend_settings"]) == {"activation": "mypkg.enable"}
    html = write_report(tmp_path).read_text()
    assert "backend mydev: unknown; torch " in html and "activation=mypkg.enable" in html


def test_a_run_without_identity_has_null_columns(tmp_path):
    write_run_tables(tmp_path, {"run_id": "r2", "backend": "mydev"}, [ROW])
    (run,) = pq.read_table(tmp_path / "runs.parquet").to_pylist()
    assert run["backend_kind"] is None and run["backend_versions"] is None and run["backend_settings"] is None
