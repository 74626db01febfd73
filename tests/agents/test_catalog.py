"""The offline catalog: every architecture the installed transformers knows, in the store schema."""

from __future__ import annotations

import json

import pytest
import transformers
from transformers import CONFIG_MAPPING
from transformers.models.auto import modeling_auto
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from agents import catalog
from agents.catalog import catalog_counts, iter_catalog


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """The whole catalog, built once per test session even across xdist workers (via the store)."""
    from filelock import FileLock

    from agents.store import read_store, write_store

    shared = tmp_path_factory.getbasetemp().parent / "catalog-store"
    with FileLock(str(shared) + ".lock"):
        if (shared / "models.parquet").exists():
            return read_store(shared)
        built = list(iter_catalog())
        write_store(shared, built)
        return built


def _mapping_classes(name: str) -> set[tuple[str, str]]:
    out = set()
    for model_type, classes in getattr(modeling_auto, name).items():
        for cls in (classes,) if isinstance(classes, str) else classes:
            out.add((model_type, cls))
    return out


def test_every_model_type_is_accounted_for(records):
    assert {r.model_type for r in records} == set(CONFIG_MAPPING_NAMES)
    assert catalog_counts()["model_types"] == len(CONFIG_MAPPING_NAMES)


def test_every_head_mapping_pair_is_a_record(records):
    pairs = {(r.model_type, r.architectures[0]) for r in records if r.architectures}
    names = [n for n in dir(modeling_auto) if n.startswith("MODEL_") and n.endswith("_MAPPING_NAMES")]
    expected = set().union(*(_mapping_classes(n) for n in names))
    assert pairs == expected
    counts = catalog_counts()
    assert counts["type_class_pairs"] == len(expected)
    assert counts["type_head_pairs"] >= counts["type_class_pairs"]


def test_ids_unique_and_order_deterministic(records):
    ids = [r.id for r in records]
    assert len(ids) == len(set(ids))
    with_class = [r.id for r in records if r.architectures]
    assert with_class == [e.id for e in catalog.entries()]
    catalog.entries.cache_clear()
    assert with_class == [e.id for e in catalog.entries()]  # rebuilt from transformers: same order
    types = [r.model_type for r in records]
    assert types == sorted(types)


def test_base_model_is_marked(records):
    bases = {(r.model_type, r.architectures[0]) for r in records if r.is_base}
    assert bases == _mapping_classes("MODEL_MAPPING_NAMES")
    for r in records:  # the base class comes first within its type
        if r.is_base:
            first = next(x for x in records if x.model_type == r.model_type)
            assert first.is_base


def test_heads_and_pipeline_tags(records):
    by_id = {r.id: r for r in records}
    bert_mlm = by_id["catalog/bert/BertForMaskedLM"]
    assert (bert_mlm.head, bert_mlm.pipeline_tag, bert_mlm.source) == ("masked_lm", "fill-mask", "catalog")
    llama = by_id["catalog/llama/LlamaForCausalLM"]
    assert (llama.head, llama.pipeline_tag, llama.is_base) == ("causal_lm", "text-generation", False)
    assert by_id["catalog/llama/LlamaModel"].is_base
    bloom = by_id["catalog/bloom/BloomForCausalLM"]  # in two heads: one record, both tagged
    assert bloom.head == "causal_lm" and {"head:causal_lm", "head:pretraining"} <= set(bloom.tags)


def test_config_only_types_are_broken_with_a_reason(records):
    sub = {r.model_type: r for r in records if r.broken_reason == "config_only_type"}
    names = [n for n in dir(modeling_auto) if n.startswith("MODEL_") and n.endswith("_MAPPING_NAMES")]
    with_class = {t for n in names for t, _ in _mapping_classes(n)}
    assert set(sub) == set(CONFIG_MAPPING_NAMES) - with_class
    assert "blip_text_model" in sub and sub["blip_text_model"].architectures == []
    assert all(r.id == f"catalog/{r.model_type}" and r.status == "broken" for r in sub.values())


def test_every_ok_record_has_a_default_config_of_its_type(records):
    for r in records:
        if r.status == "ok":
            assert r.config_level == "default" and r.config_dict() is not None, r.id
            # gpt-sw3 reuses GPT2Config: the config says what its class says
            assert r.config_dict().get("model_type") in (CONFIG_MAPPING[r.model_type].model_type, ""), r.id
        else:
            assert r.broken_reason in {"config_only_type", "config_not_instantiable"}, r.id


def test_a_sample_of_default_configs_instantiates_with_their_class(records):
    ok = [r for r in records if r.status == "ok"]
    sample = ok[:: max(1, len(ok) // 25)]
    for r in sample:
        cfg = CONFIG_MAPPING[r.model_type](**r.config_dict())
        assert cfg.model_type == CONFIG_MAPPING[r.model_type].model_type
        assert catalog.is_known_architecture(r.architectures[0])
        assert hasattr(transformers, r.architectures[0]), r.architectures[0]


def test_catalog_round_trips_through_the_store(records, tmp_path):
    from agents.store import read_store, write_store

    subset = records[:200]
    write_store(tmp_path, subset)
    assert read_store(tmp_path) == subset


def test_cli_catalog_json_summary(tmp_path, capsys):
    from harness.cli import main

    assert main(["crawl", "--out", str(tmp_path), "--limit", "40", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["source"] == "catalog" and summary["total"] == 40
    assert summary["ok"] + summary["broken"] == 40
    assert summary["store"] == str(tmp_path / "models.parquet")
