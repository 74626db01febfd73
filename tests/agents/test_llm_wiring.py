"""`harness crawl` triages its broken rows into DIR/triage.parquet: rules by default, the LLM when
configured."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from agents.crawl_triage import TRIAGE_FILE
from agents.llm import DECISIONS_FILE
from harness.cli import main
from tests.fakes.openai_server import FakeOpenAI

ROWS = [
    {
        "id": "ok/llama",
        "downloads": 5,
        "model_type": "llama",
        "config_level": "full",
        "config": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64},
    },
    {"id": "b/none", "downloads": 1, "config": None},
    {
        "id": "b/custom",
        "downloads": 2,
        "config_level": "full",
        "config": {"model_type": "acme", "auto_map": {"AutoModel": "modeling_acme.AcmeModel"}},
    },
    {"id": "b/odd", "downloads": 3, "config_level": "full", "config": {"model_type": "zzzodd"}},
]
EXPECTED = {"b/none": "no_config", "b/custom": "trust_remote_code", "b/odd": "unknown_model_type"}
LLM_ENV = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "HARNESS_LLM_MODEL",
    "HARNESS_LLM_MAX_RETRIES",
    "HARNESS_LLM_TIMEOUT",
)


@pytest.fixture()
def snapshot(tmp_path, monkeypatch):
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "dump.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def crawl(path, out, capsys) -> dict:
    assert main(["crawl", "--source", f"snapshot:{path}", "--out", str(out), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_crawl_writes_rule_triage_for_every_broken_model(snapshot, tmp_path, capsys):
    out = tmp_path / "out"
    summary = crawl(snapshot, out, capsys)
    assert (summary["total"], summary["ok"], summary["broken"]) == (4, 1, 3)  # existing keys unchanged
    assert summary["broken_by_reason"] == {"no_config": 1, "trust_remote_code": 1, "unknown_model_type": 1}
    frame = pd.read_parquet(out / TRIAGE_FILE)
    assert sorted(frame["id"]) == sorted(EXPECTED)  # one row per broken model, none for the ok one
    assert dict(zip(frame["id"], frame["category"])) == EXPECTED
    assert dict(zip(frame["id"], frame["broken_reason"])) == EXPECTED
    assert set(frame["source"]) == {"rules"} and frame["explanation"].str.len().min() > 0
    tri = summary["triage"]
    assert tri["llm"] is False and tri["file"] == str(out / TRIAGE_FILE)
    assert tri["by_category"] == {"no_config": 1, "trust_remote_code": 1, "unknown_model_type": 1}
    assert not (out / DECISIONS_FILE).exists()  # no LLM configured: nothing asked, nothing logged


def test_crawl_triage_uses_the_configured_llm(snapshot, tmp_path, capsys, monkeypatch):
    answers = [
        {
            "content": json.dumps(
                {"category": "unknown_model_type", "explanation": f"LLM says {i}: a custom architecture."}
            )
        }
        for i in range(3)
    ]
    with FakeOpenAI(answers) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-wiring")
        monkeypatch.setenv("HARNESS_LLM_MODEL", "fake-model")
        monkeypatch.setenv("HARNESS_LLM_MAX_RETRIES", "0")
        out = tmp_path / "out"
        summary = crawl(snapshot, out, capsys)
        asked = len(srv.chat_requests())
    assert asked == 3
    frame = pd.read_parquet(out / TRIAGE_FILE)
    assert set(frame["source"]) == {"llm"} and set(frame["category"]) == {"unknown_model_type"}
    assert frame["explanation"].str.startswith("LLM says").all()
    assert dict(zip(frame["id"], frame["broken_reason"])) == EXPECTED  # the store's reason code is kept
    assert summary["triage"]["llm"] is True and summary["triage"]["by_category"] == {"unknown_model_type": 3}
    log = pd.read_parquet(out / DECISIONS_FILE)
    assert list(log["use"]) == ["triage"] * 3 and log["accepted"].all()


def test_dead_llm_endpoint_falls_back_to_rules_and_the_crawl_succeeds(
    snapshot, tmp_path, capsys, monkeypatch
):
    with FakeOpenAI(default={"status": 503}) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("HARNESS_LLM_MODEL", "fake-model")
        monkeypatch.setenv("HARNESS_LLM_MAX_RETRIES", "0")
        out = tmp_path / "out"
        summary = crawl(snapshot, out, capsys)
    frame = pd.read_parquet(out / TRIAGE_FILE)
    assert dict(zip(frame["id"], frame["category"])) == EXPECTED and set(frame["source"]) == {"rules"}
    assert summary["triage"]["by_source"] == {"rules": 3}
    log = pd.read_parquet(out / DECISIONS_FILE)
    assert log["fallback_used"].all() and log["reason"].iloc[0] == "http 503"


def test_bad_llm_setting_does_not_fail_the_crawl(snapshot, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("HARNESS_LLM_MODEL", "fake-model")
    monkeypatch.setenv("HARNESS_LLM_TIMEOUT", "soon")
    summary = crawl(snapshot, tmp_path / "out", capsys)
    assert summary["triage"]["llm"] is False and "HARNESS_LLM_TIMEOUT" in summary["triage"]["note"]
    assert summary["triage"]["by_source"] == {"rules": 3}
