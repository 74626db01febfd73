"""`harness classify` / `harness select` on crawl stores: files written, summaries, the LLM hook."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from agents.store import ModelRecord, write_store
from agents.traits import TRAIT_NAMES, reset_profiles
from agents.vocabulary import UNKNOWN
from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "HARNESS_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    reset_profiles()
    yield
    reset_profiles()


def small_store(directory) -> None:
    def cfg(**kw):
        return json.dumps(kw)

    write_store(
        directory,
        [
            ModelRecord(
                id="org/llama-gqa",
                source="hub",
                downloads=500,
                model_type="llama",
                architectures=["LlamaForCausalLM"],
                config_level="full",
                config=cfg(
                    model_type="llama",
                    num_attention_heads=32,
                    num_key_value_heads=8,
                    hidden_size=64,
                    num_hidden_layers=2,
                    vocab_size=100,
                ),
            ),
            ModelRecord(
                id="org/bert",
                source="hub",
                downloads=900,
                model_type="bert",
                architectures=["BertForMaskedLM"],
                config_level="arch_only",
                config=cfg(model_type="bert"),
            ),
            ModelRecord(
                id="org/t5",
                source="hub",
                downloads=40,
                model_type="t5",
                architectures=["T5ForConditionalGeneration"],
                config_level="partial",
                config=cfg(model_type="t5", num_heads=8, d_model=64, num_layers=2),
            ),
            ModelRecord(
                id="org/mystery",
                source="hub",
                downloads=7,
                model_type="acme_mystery",
                architectures=["AcmeForCausalLM"],
                config_level="full",
                status="broken",
                broken_reason="unknown_model_type",
                config=cfg(model_type="acme_mystery"),
            ),
            ModelRecord(
                id="org/nothing", source="hub", downloads=3, status="broken", broken_reason="no_config"
            ),
        ],
    )


def test_classify_then_select_write_parquet_and_one_json_summary(tmp_path, cache, capsys):
    from harness.cli import main

    small_store(tmp_path)
    assert main(["classify", "--in", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "population  5 models (3 usable, 2 broken)" in out and "unknown_model_type" in out
    traits = pd.read_parquet(tmp_path / "traits.parquet")
    assert list(traits.columns[: 1 + len(TRAIT_NAMES)]) == ["id", *TRAIT_NAMES]
    assert len(traits) == 5
    row = traits.set_index("id").loc["org/llama-gqa"]
    assert (row["attention"], row["head"], row["structure"]) == ("gqa-4", "causal_lm", "decoder")

    assert main(["select", "--in", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    for key in (
        "population",
        "broken_by_reason",
        "trait_values",
        "representatives",
        "download_weighted_coverage",
    ):
        assert key in summary
    assert summary["population"] == 5 and summary["broken_by_reason"] == {
        "no_config": 1,
        "unknown_model_type": 1,
    }
    reps = pd.read_parquet(tmp_path / "representatives.parquet")
    assert set(reps["id"]) == {"org/llama-gqa", "org/bert", "org/t5"}  # three families, none broken
    assert reps["cluster_download_share"].sum() == pytest.approx(1.0)
    assert summary["covered"] == summary["universe"]


def test_select_reuses_current_traits_and_reports_missing_store(tmp_path, cache, capsys):
    from harness.cli import main

    assert main(["select", "--in", str(tmp_path / "nowhere")]) == 2
    assert "no crawl store" in capsys.readouterr().err
    small_store(tmp_path)
    assert main(["classify", "--in", str(tmp_path), "--json"]) == 0
    json.loads(capsys.readouterr().out)
    assert main(["select", "--in", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "using" in captured.err and "representatives chosen  3" in captured.out


def test_classify_asks_the_llm_only_for_unknown_types(tmp_path, cache, monkeypatch, capsys):
    from harness.cli import main

    small_store(tmp_path)
    script = [{"content": json.dumps({"traits": {"attention": "gqa-2", "norm": "layernorm"}})}]
    with FakeOpenAI(script) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        monkeypatch.setenv("HARNESS_LLM_MODEL", "fake-model")
        monkeypatch.setenv("HARNESS_LLM_MAX_RETRIES", "0")
        assert main(["classify", "--in", str(tmp_path), "--json"]) == 0
        capsys.readouterr()
        asked = [json.dumps(r["body"]) for r in srv.chat_requests()]
    assert len(asked) == 1 and "acme_mystery" in asked[0]  # known types never reach the LLM
    traits = pd.read_parquet(tmp_path / "traits.parquet").set_index("id")
    assert traits.loc["org/mystery", "attention"] == "gqa-2"
    assert sorted(traits.loc["org/mystery", "filled_by_llm"]) == ["attention", "norm"]
    assert list(traits.loc["org/bert", "filled_by_llm"]) == []
    log = pd.read_parquet(tmp_path / "llm_decisions.parquet")
    assert log["accepted"].tolist() == [True] and log["subject"].tolist() == ["org/mystery"]


@pytest.mark.shared_data
def test_real_population_slice(tmp_path, cache, hub_models_path):
    """2,000 real listings through the snapshot source: classify + select run end to end."""
    from agents.classify import classify_store
    from agents.select import select
    from agents.snapshot import iter_snapshot

    write_store(tmp_path, iter_snapshot(hub_models_path, limit=2000, instantiate=False))
    frame, summary = classify_store(tmp_path)
    assert summary["population"] == 2000
    assert sum(summary["broken_by_reason"].values()) == summary["broken"]
    ok = frame[frame["status"] == "ok"]
    assert (ok["model_type"] != UNKNOWN).all()
    sel = select(frame)
    assert sel.covered == sel.universe > 0
    assert {r.model_type for r in sel.representatives} == set(ok["model_type"])
    assert 0 < sel.download_weighted_coverage <= 1
