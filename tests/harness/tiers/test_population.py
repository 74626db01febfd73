"""Full tier: identical shrunk architectures run once, the outcome counts for each model."""

from __future__ import annotations

import json

import pytest

from contracts.records import ModelSpec
from harness.tiers import population
from harness.tiers.population import Member, dedupe_cases, load_population


@pytest.fixture
def fake_signature(monkeypatch):
    """Stand-in for harness.build.signature.architecture_signature: type + hidden size decide the
    architecture."""
    monkeypatch.setattr(
        population, "_case_key", lambda item: f"{item[0]}/h{item[2].get('hidden_size', 'default')}"
    )
    monkeypatch.setattr(population, "_known_type", lambda t: t in {"bert", "llama"})


def _m(mid, mtype, downloads, **config):
    return Member(mid, downloads, ModelSpec(mid, mtype, config=config, downloads=downloads))


def test_dedupe_groups_identical_architectures_and_keeps_unrunnable(fake_signature):
    members = [
        _m("a", "bert", 5, hidden_size=768),
        _m("b", "bert", 50, hidden_size=768),
        _m("c", "bert", 1, hidden_size=1024),
        _m("d", "llama", 7),
        Member("e", 3, not_runnable="no_config"),
        Member("f", 4, not_runnable="no_config"),
    ]
    cases = dedupe_cases(members)
    by_id = {c.case_id: c for c in cases}
    assert set(by_id) == {"bert/h768", "bert/h1024", "llama/hdefault", "not_attempted/no_config"}
    big = by_id["bert/h768"]
    assert big.model_ids == ["b", "a"] and big.weight == 55.0  # most downloaded model represents it
    assert big.payload["spec"]["model_id"] == "b"
    assert by_id["not_attempted/no_config"].payload == {"not_attempted": "no_config"}
    assert by_id["not_attempted/no_config"].weight == 7.0
    assert cases[0].case_id == "bert/h768"  # most downloaded first, so --limit keeps what matters
    assert sum(len(c.model_ids) for c in cases) == len(members)  # every model attributed exactly once


def test_snapshot_records_become_members_with_reasons(tmp_path, monkeypatch):
    monkeypatch.setattr(population, "_known_type", lambda t: t == "bert")
    path = tmp_path / "snap.jsonl"
    rows = [
        {
            "id": "ok",
            "downloads": 9,
            "model_type": "bert",
            "config": {"model_type": "bert", "hidden_size": 8},
        },
        {"id": "weird", "downloads": 1, "model_type": "notatype", "config": {"model_type": "notatype"}},
        {"id": "bare", "downloads": 2},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    members = {m.model_id: m for m in load_population(str(path))}
    assert members["ok"].spec is not None and members["ok"].spec.config["hidden_size"] == 8
    assert members["weird"].spec is None and members["weird"].not_runnable
    assert members["bare"].spec is None and members["bare"].not_runnable
    with pytest.raises(ValueError, match="not a crawl store"):
        load_population(str(tmp_path / "x.csv"))


def test_limit_signs_only_enough_of_the_population(fake_signature, monkeypatch):
    signed = []
    real = population._case_key
    monkeypatch.setattr(population, "_case_key", lambda item: signed.append(item) or real(item))
    members = [_m(f"m{i}", "bert", 1000 - i, hidden_size=8 * (i % 50)) for i in range(500)]
    taken = population.sample_members(members, limit=3)
    assert len(signed) < 100  # not the whole population
    assert taken[0].model_id == "m0"  # most downloaded first
    cases = dedupe_cases(taken)
    assert len(cases) >= 3 and cases[0].model_ids[0] == "m0"
