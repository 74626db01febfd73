"""Snapshot source: a JSONL(.gz)/Parquet dump of Hub metadata, triaged into store records."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from itertools import islice

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agents.crawl import write_records
from agents.snapshot import iter_snapshot
from agents.store import read_store
from agents.triage import reason_codes

ROWS = [
    {
        "id": "org/llama-ish",
        "downloads": 50,
        "likes": 3,
        "pipeline_tag": "text-generation",
        "library_name": None,
        "tags": None,
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "config": {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64},
        "config_level": "partial",
        "config_source": "some_listing",
        "downloads_snapshot": "2026-05",
    },
    {
        "id": "org/bert-arch",
        "downloads": "12",
        "likes": None,
        "pipeline_tag": "<NA>",
        "library_name": "transformers",
        "tags": ["pytorch", "bert"],
        "model_type": None,
        "architectures": ["BertForSequenceClassification"],
        "config": {"architectures": ["BertForSequenceClassification"]},
        "config_level": "arch_only",
    },
    {"id": "org/nothing", "downloads": 7, "config": None, "config_level": None},
    {"id": "org/llama-ish", "downloads": 1},  # a duplicate id: the first wins
]


def _write_jsonl(path, rows, extra_lines=()):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return path


def test_rows_become_triaged_records(tmp_path):
    path = _write_jsonl(tmp_path / "dump.jsonl.gz", ROWS, extra_lines=["{not json", "[1, 2]", ""])
    records = list(iter_snapshot(path))
    by_id = {}
    for r in records:
        by_id.setdefault(r.id, r)
    llama = by_id["org/llama-ish"]
    assert (llama.status, llama.config_level, llama.model_type, llama.downloads) == (
        "ok",
        "partial",
        "llama",
        50,
    )
    assert json.loads(llama.config)["num_hidden_layers"] == 4
    assert (llama.config_source, llama.downloads_snapshot) == ("some_listing", "2026-05")
    bert = by_id["org/bert-arch"]
    assert bert.status == "ok" and bert.model_type == "bert"  # inferred from the class
    assert bert.pipeline_tag is None and bert.downloads == 12 and bert.tags == ["pytorch", "bert"]
    assert by_id["org/nothing"].broken_reason == "no_config"
    unreadable = [r for r in records if r.broken_reason == "unreadable_row"]
    assert [r.id for r in unreadable] == ["dump.jsonl.gz:5", "dump.jsonl.gz:6"]  # nothing silently dropped


def test_parquet_dump_reads_like_jsonl(tmp_path):
    rows = [
        dict(r, downloads=int(r["downloads"]), config=json.dumps(r["config"]) if r.get("config") else None)
        for r in ROWS[:3]
    ]
    table = pa.Table.from_pylist(
        [{k: r.get(k) for k in ("id", "downloads", "model_type", "config", "config_level")} for r in rows]
    )
    pq.write_table(table, tmp_path / "dump.parquet")
    jsonl = _write_jsonl(tmp_path / "dump.jsonl", ROWS[:3])
    from_parquet = [
        (r.id, r.status, r.broken_reason, r.model_type) for r in iter_snapshot(tmp_path / "dump.parquet")
    ]
    from_jsonl = [(r.id, r.status, r.broken_reason, r.model_type) for r in iter_snapshot(jsonl)]
    assert from_parquet == from_jsonl


def test_write_records_dedupes_and_summarises(tmp_path):
    path = _write_jsonl(tmp_path / "dump.jsonl", ROWS)
    summary = write_records(tmp_path / "out", "snapshot", iter_snapshot(path))
    assert summary.total == 3 and summary.duplicates == 1
    assert summary.broken_by_reason == {"no_config": 1}
    assert [r.id for r in read_store(tmp_path / "out")] == ["org/llama-ish", "org/bert-arch", "org/nothing"]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(iter_snapshot(tmp_path / "nope.jsonl"))


def test_cli_snapshot_source(tmp_path, capsys):
    from harness.cli import main

    path = _write_jsonl(tmp_path / "dump.jsonl", ROWS)
    assert main(["crawl", "--source", f"snapshot:{path}", "--out", str(tmp_path / "out"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["source"], summary["total"], summary["ok"]) == ("snapshot", 3, 2)
    assert (
        main(
            ["crawl", "--source", f"snapshot:{tmp_path / 'missing.jsonl'}", "--out", str(tmp_path), "--json"]
        )
        == 1
    )
    assert "does not exist" in json.loads(capsys.readouterr().out)["error"]
    assert main(["crawl", "--source", "ftp", "--out", str(tmp_path), "--json"]) == 1
    assert "unknown --source" in json.loads(capsys.readouterr().out)["error"]


# -- the real dump (../shared/data) ----------------------------------------------------------------


def _raw(path, n=None):
    with gzip.open(path, "rt") as f:
        for line in islice(f, n):
            yield json.loads(line)


@pytest.mark.shared_data
def test_real_snapshot_head(hub_models_path):
    n = 3000
    raw = list(_raw(hub_models_path, n))
    records = list(iter_snapshot(hub_models_path, limit=n))
    assert [r.id for r in records] == [r["id"] for r in raw]
    assert Counter(r.config_level for r in records) == Counter(r["config_level"] for r in raw)
    assert {r.broken_reason for r in records if r.status == "broken"} <= set(reason_codes())
    by_id = {r.id: r for r in records}
    # full configs of natively supported models are ok, auto_map or not
    for rid in ("Qwen/Qwen3-0.6B", "deepseek-ai/DeepSeek-V3.2"):
        if rid in by_id:
            assert by_id[rid].status == "ok" and by_id[rid].config_level == "full", by_id[rid].broken_detail
    # every raw record with a full config whose type transformers lacks is not "ok"
    from agents.catalog import model_types

    for r in raw:
        if r["config_level"] == "full" and r["model_type"] not in model_types():
            assert by_id[r["id"]].status == "broken"


@pytest.mark.slow
@pytest.mark.shared_data
def test_real_snapshot_whole_file_loses_nothing(hub_models_path, tmp_path):
    raw_ids = [r["id"] for r in _raw(hub_models_path)]
    summary = write_records(tmp_path, "snapshot", iter_snapshot(hub_models_path))
    assert summary.total + summary.duplicates == len(raw_ids)
    assert summary.ok + summary.broken == summary.total
    assert set(summary.broken_by_reason) <= set(reason_codes())
    stored = read_store(tmp_path)
    assert [r.id for r in stored] == list(dict.fromkeys(raw_ids))
