"""The crawl store: typed records <-> one Parquet file, schema version in the metadata, atomic writes."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agents import store
from agents.store import ModelRecord, read_frame, read_store, read_table, write_store


def _records() -> list[ModelRecord]:
    return [
        ModelRecord(
            id="org/a",
            source="hub",
            downloads=10,
            likes=2,
            pipeline_tag="text-generation",
            library_name="transformers",
            tags=["pytorch", "llama"],
            sha="abc",
            model_type="llama",
            architectures=["LlamaForCausalLM"],
            config=json.dumps({"model_type": "llama"}),
            config_level="full",
            last_modified="2026-01-01T00:00:00+00:00",
        ),
        ModelRecord(
            id="org/b",
            source="snapshot",
            config_level=None,
            status="broken",
            broken_reason="no_config",
            broken_detail="nothing known",
            downloads_snapshot="2022-07",
            config_source=None,
        ),
        ModelRecord(
            id="catalog/bert/BertModel",
            source="catalog",
            downloads=0,
            is_base=True,
            head="base",
            model_type="bert",
            architectures=["BertModel"],
            config="{}",
            config_level="default",
        ),
    ]


def test_round_trip_keeps_every_field(tmp_path):
    path = write_store(tmp_path, _records())
    assert path == tmp_path / "models.parquet"
    assert read_store(tmp_path) == _records()
    assert read_store(path) == _records()  # the file itself works too


def test_schema_version_and_sources_in_metadata(tmp_path):
    write_store(tmp_path, _records())
    meta = pq.read_schema(tmp_path / "models.parquet").metadata
    assert meta[b"harness.store.schema_version"].decode() == store.SCHEMA_VERSION
    assert meta[b"harness.store.sources"].decode() == "catalog,hub,snapshot"


def test_columns_have_the_documented_types(tmp_path):
    write_store(tmp_path, _records())
    schema = pq.read_schema(tmp_path / "models.parquet")
    assert schema.field("downloads").type == pa.int64()
    assert schema.field("tags").type == pa.list_(pa.string())
    assert schema.field("architectures").type == pa.list_(pa.string())
    frame = read_frame(tmp_path)
    assert list(frame["id"]) == ["org/a", "org/b", "catalog/bert/BertModel"]
    assert frame["downloads"].isna().tolist() == [False, True, False]


def test_newer_major_version_is_refused(tmp_path):
    table = store.records_to_table(_records()).replace_schema_metadata(
        {b"harness.store.schema_version": b"99.0"}
    )
    pq.write_table(table, tmp_path / "models.parquet")
    with pytest.raises(ValueError, match=r"schema version 99\.0"):
        read_table(tmp_path)


def test_older_minor_file_without_extra_columns_reads_with_nulls(tmp_path):
    table = store.records_to_table(_records()).drop_columns(["head", "last_modified"])
    pq.write_table(table, tmp_path / "models.parquet")
    back = read_store(tmp_path)
    assert [r.id for r in back] == [r.id for r in _records()]
    assert all(r.head is None and r.last_modified is None for r in back)


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path, monkeypatch):
    write_store(tmp_path, _records())

    def disk_full(table, where, **kw):
        open(where, "wb").write(b"PAR1 half a file")
        raise OSError("No space left on device")

    monkeypatch.setattr(store.pq, "write_table", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_store(tmp_path, [ModelRecord(id="x", source="hub")])
    monkeypatch.undo()
    assert read_store(tmp_path) == _records()  # the old store survived the failed write
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.parquet"]


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="harness crawl"):
        read_store(tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"source": "web"}, "source"),
        ({"status": "maybe"}, "status"),
        ({"config_level": "huge"}, "config_level"),
        ({"status": "broken"}, "broken_reason"),
    ],
)
def test_record_validation(kwargs, match):
    kwargs.setdefault("source", "hub")
    with pytest.raises(ValueError, match=match):
        ModelRecord(id="org/x", **kwargs)


def test_config_dict_helper():
    assert _records()[0].config_dict() == {"model_type": "llama"}
    assert ModelRecord(id="x", source="hub", config="[1]").config_dict() is None
    assert ModelRecord(id="x", source="hub", config="{oops").config_dict() is None


def test_record_to_model_spec():
    spec = _records()[0].to_spec()
    assert (spec.model_id, spec.model_type, spec.architecture, spec.source) == (
        "org/a",
        "llama",
        "LlamaForCausalLM",
        "hub",
    )
    assert spec.config == {"model_type": "llama"} and spec.downloads == 10
