"""The four Parquet tables: written atomically, one row per case and stage, readable without the harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

from reports.errors import SchemaVersionError
from reports.schema import META_SCHEMA_VERSION, SCHEMA_VERSION, TABLES, column_names, required_columns
from reports.tables import read_results, read_table, write_run_tables
from tests.reports.reports_synth import base_rows

TABLE_NAMES = ("runs", "results", "fallbacks", "per_op")


def test_results_one_row_per_case_and_stage(make_run):
    run = make_run()
    df = read_results(run)
    rows = base_rows()
    assert len(df) == len(rows)
    assert not df.duplicated(["tier", "case_id", "stage"]).any()
    assert set(required_columns(TABLES["results"])) <= set(df.columns)
    assert list(df.columns) == column_names(TABLES["results"])
    assert set(df["run_id"]) == {"run1"}


def test_schema_version_in_metadata_and_runs(make_run):
    run = make_run()
    for name in TABLE_NAMES:
        meta = pq.read_schema(run / f"{name}.parquet").metadata
        assert int(meta[META_SCHEMA_VERSION]) == SCHEMA_VERSION
    runs = read_table(run, "runs")
    assert runs["schema_version"].tolist() == [SCHEMA_VERSION]
    assert runs["backend"].tolist() == ["neuron"]
    assert list(runs["tiers"][0]) == ["unit", "representative", "full"]
    assert runs["torch_version"][0].startswith("2.13")


def test_model_ids_weight_traits_and_extra(make_run):
    rows = base_rows()
    rows[0]["worker_pid"] = 4242  # a field the schema does not know goes to `extra`, not lost
    run = make_run(rows=rows)
    df = read_results(run)
    full_a = df[(df["case_id"] == "full/a") & (df["stage"] == "load")].iloc[0]
    assert list(full_a["model_ids"]) == ["a", "b", "c"]
    assert full_a["n_models"] == 3 and full_a["weight"] == 600.0 and full_a["model_id"] == "a"
    assert json.loads(full_a["traits"])["modality"] == "text"
    first = df[(df["case_id"] == rows[0]["case_id"]) & (df["stage"] == rows[0]["stage"])].iloc[0]
    assert json.loads(first["extra"]) == {"worker_pid": 4242}
    unit = df[df["tier"] == "unit"]
    assert (unit["n_models"] == 0).all() and unit["model_id"].isna().all()


def test_bad_status_is_recorded_as_error_not_lost(tmp_path):
    rows = [{"tier": "unit", "case_id": "u1", "stage": "op", "status": "exploded"}]
    with pytest.warns(UserWarning, match="unknown status"):
        write_run_tables(tmp_path, {"run_id": "r"}, rows)
    df = read_results(tmp_path)
    assert df["status"].tolist() == ["error"] and "exploded" in df["reason"][0]


def test_row_without_case_id_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="case_id"):
        write_run_tables(tmp_path, {"run_id": "r"}, [{"tier": "unit", "stage": "op", "status": "pass"}])


def test_rewrite_is_atomic_and_replaces(make_run):
    run = make_run()
    rows = base_rows()[:6]
    write_run_tables(run, {"run_id": "run1"}, rows)
    assert len(read_results(run)) == 6
    assert not [p for p in os.listdir(run) if ".tmp" in p]


def test_fallbacks_attributed_to_case_and_per_op_denominators(make_run):
    run = make_run()
    falls = read_table(run, "fallbacks")
    cdist = falls[falls["op"] == "aten::_cdist_forward"].iloc[0]  # event named only its model
    assert (cdist["tier"], cdist["case_id"], cdist["count"]) == ("representative", "rep/gpt2", 7)
    assert json.loads(cdist["input_shapes"]) == [[2, 3], [4, 3]]
    per_op = read_table(run, "per_op").set_index(["tier", "op"])
    foo = per_op.loc[("full", "aten::foo")]
    assert (foo["models_blocked"], foo["models_total"], foo["cases_blocked"]) == (2, 6, 1)
    assert foo["download_share_blocked"] == pytest.approx(400 / 1000)
    assert foo["fallback_calls"] == 3
    assert per_op.loc[("unit", "aten::add.Tensor")]["native_calls"] == 10  # 5 unit cases x 2 calls
    assert per_op["native_calls"].isna()[("full", "aten::foo")]  # the runner counted none there: unknown


def test_newer_schema_is_refused(make_run):
    run = make_run()
    tbl = pq.read_table(run / "results.parquet")
    meta = dict(tbl.schema.metadata)
    meta[META_SCHEMA_VERSION] = str(SCHEMA_VERSION + 1).encode()
    pq.write_table(tbl.replace_schema_metadata(meta), run / "results.parquet")
    with pytest.raises(SchemaVersionError, match="newer"):
        read_results(run)


def test_nightly_dir_reads_every_tier(make_run, tmp_path):
    rows = base_rows()
    night = tmp_path / "night"
    for tier in ("unit", "full"):
        make_run(tier, rows=[r for r in rows if r["tier"] == tier], run_id="n1", parent=night, events=[])
    df = read_results(night)
    assert set(df["tier"]) == {"unit", "full"}
    assert len(df) == sum(r["tier"] in ("unit", "full") for r in rows)


def test_duckdb_reads_tables(make_run):
    duckdb = pytest.importorskip("duckdb")
    run = make_run()
    con = duckdb.connect()
    got = con.execute(
        f"SELECT tier, stage, count(*) FILTER (WHERE status = 'pass'), count(*) FROM '{run}/results.parquet' "
        "WHERE tier = 'full' AND stage = 'on_device' GROUP BY ALL"
    ).fetchall()
    assert got == [("full", "on_device", 1, 3)]
    models = con.execute(
        f"SELECT sum(len(model_ids)) FROM '{run}/results.parquet' WHERE stage = 'load' AND tier = 'full'"
    ).fetchone()[0]
    assert models == 6
    modality = con.execute(
        f"SELECT DISTINCT json_extract_string(traits, '$.modality') FROM '{run}/results.parquet' "
        "WHERE tier = 'full' ORDER BY 1"
    ).fetchall()
    assert modality == [("text",), ("vision",)]
    for name in TABLE_NAMES:
        cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM '{run}/{name}.parquet'").fetchall()]
        assert cols == column_names(TABLES[name])


def test_polars_reads_tables(make_run):
    pl = pytest.importorskip("polars")
    run = make_run()
    df = pl.read_parquet(run / "results.parquet")
    assert df.filter(pl.col("tier") == "full").select(pl.col("model_ids").list.len().sum()).item() == 6 * 6
    per_op = pl.read_parquet(run / "per_op.parquet")
    assert per_op.filter(pl.col("op") == "aten::foo")["models_blocked"].to_list() == [2]
    for name in TABLE_NAMES:
        assert pl.read_parquet(run / f"{name}.parquet").columns == column_names(TABLES[name])


def test_pandas_reads_tables_without_the_harness(make_run, tmp_path):
    run = make_run()
    script = textwrap.dedent(f"""
        import sys
        class Block:  # make the harness packages unimportable, as on a machine without them
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("harness", "reports", "backend", "registry", "agents"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import pandas as pd
        df = pd.read_parquet({str(run / "results.parquet")!r})
        runs = pd.read_parquet({str(run / "runs.parquet")!r})
        pd.read_parquet({str(run / "fallbacks.parquet")!r}); pd.read_parquet({str(run / "per_op.parquet")!r})
        assert not any(m.split(".")[0] in ("harness", "reports") for m in sys.modules)
        print(len(df), int((df.status == "pass").sum()), int(runs.schema_version[0]))
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert out.returncode == 0, out.stderr
    rows = base_rows()
    assert out.stdout.split() == [
        str(len(rows)),
        str(sum(r["status"] == "pass" for r in rows)),
        str(SCHEMA_VERSION),
    ]


def test_every_column_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "reports.md").read_text()
    for table in TABLES.values():
        assert f"`{table.name}.parquet`" in doc
        for col in table.columns:
            assert f"| `{col.name}` |" in doc, f"{table.name}.{col.name} missing from the reports docs"
