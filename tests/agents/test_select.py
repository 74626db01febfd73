"""Representative selection: full cover of values and interacting pairs, preferences, determinism."""

from __future__ import annotations

import itertools
import json
import math

import pandas as pd
import pytest

from agents.select import (
    cover_traits,
    elements_of,
    estimate_params,
    harmonic,
    interacting_pairs,
    load_representatives,
    select,
    write_selection,
)
from agents.traits import TRAIT_NAMES
from agents.vocabulary import UNKNOWN


def model(mid: str, downloads: int = 0, hidden: int = 64, status: str = "ok", **traits) -> dict:
    base = {t: "x" for t in TRAIT_NAMES}
    base.update(
        model_type="fam",
        attention="mha",
        position="rope",
        structure="decoder",
        head="causal_lm",
        modality="text",
        moe="dense",
    )
    base.update(traits)
    cfg = {"model_type": base["model_type"], "hidden_size": hidden, "num_hidden_layers": 2, "vocab_size": 100}
    return {
        "id": mid,
        **base,
        "downloads": downloads,
        "config": json.dumps(cfg),
        "architecture": "FamForCausalLM",
        "source": "hub",
        "status": status,
        "broken_reason": None if status == "ok" else "no_config",
    }


def population() -> pd.DataFrame:
    rows = [
        model("a/popular", 1000, attention="gqa-4"),
        model("b/obscure", 1, attention="gqa-4"),  # same signature as a/popular, fewer downloads
        model("c/mla", 50, attention="mla", moe="moe+shared"),
        model("d/enc", 10, structure="encoder", head="masked_lm", position="absolute"),
        model(
            "e/vision",
            0,
            modality="vision",
            structure="encoder",
            head="image_classification",
            position="absolute",
        ),
        model("f/unknowns", 5, attention=UNKNOWN, norm=UNKNOWN),
        model("g/broken", 10**9, attention="exotic", status="broken"),
    ]
    return pd.DataFrame(rows)


def universe(frame: pd.DataFrame) -> set[str]:
    ok = frame[frame["status"] == "ok"]
    return {e for rec in ok[list(TRAIT_NAMES)].to_dict("records") for e in elements_of(rec)}


def test_every_value_and_interacting_pair_is_covered():
    frame = population()
    sel = select(frame)
    covered = {e for r in sel.representatives for e in r.covers}
    assert covered == universe(frame)
    assert sel.covered == sel.universe == len(universe(frame))
    # pairs are only between the declared interacting traits, and never with unknown
    pairs = {tuple(sorted(p)) for p in interacting_pairs()}
    for e in covered:
        if "&" in e:
            a, b = (x.split("=")[0] for x in e.split("&"))
            assert tuple(sorted((a, b))) in pairs
        assert f"={UNKNOWN}" not in e
    assert "attention=exotic" not in covered  # broken models are not candidates


def test_prefers_most_downloaded_then_smallest_then_id():
    ids = {r.id for r in select(population()).representatives}
    assert "a/popular" in ids and "b/obscure" not in ids
    twins = pd.DataFrame(
        [model("z/big", 7, hidden=4096), model("y/small", 7, hidden=64), model("x/small", 7, hidden=64)]
    )
    assert [r.id for r in select(twins).representatives] == ["x/small"]


def test_deterministic_under_row_order():
    frame = population()
    first = [(r.id, r.covers, r.cluster_download_share) for r in select(frame).representatives]
    for seed in range(3):
        shuffled = frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
        assert [(r.id, r.covers, r.cluster_download_share) for r in select(shuffled).representatives] == first


def test_greedy_cover_is_within_its_bound_of_the_optimum():
    frame = population()
    sel = select(frame)
    assert sel.max_set_size == max(
        len(elements_of(r)) for r in frame[list(TRAIT_NAMES)].to_dict("records")[:-1]
    )
    assert sel.greedy_bound == pytest.approx(harmonic(sel.max_set_size))
    # brute-force the smallest cover of this tiny population: greedy costs <= 2 H(d) x optimum
    ok = frame[frame["status"] == "ok"]
    sets = [set(elements_of(r)) for r in ok[list(TRAIT_NAMES)].to_dict("records")]
    target = set().union(*sets)
    best = next(
        k
        for k in range(1, len(sets) + 1)
        if any(set().union(*c) == target for c in itertools.combinations(sets, k))
    )
    assert best <= len(sel.representatives) <= 2 * sel.greedy_bound * best


def test_cluster_shares_and_download_weighted_coverage():
    frame = population()
    sel = select(frame)
    ok = frame[frame["status"] == "ok"]
    assert sel.total_downloads == int(ok["downloads"].sum())
    assert sum(r.cluster_download_share for r in sel.representatives) == pytest.approx(1.0)
    assert sum(r.cluster_models for r in sel.representatives) == len(ok)
    # exact-signature coverage, recomputed by hand
    reps = {r.id for r in sel.representatives}
    sig = lambda r: tuple(r[t] for t in cover_traits())  # noqa: E731
    rep_sigs = {sig(r) for r in ok.to_dict("records") if r["id"] in reps}
    covered_dl = sum(r["downloads"] for r in ok.to_dict("records") if sig(r) in rep_sigs)
    assert sel.download_weighted_coverage == pytest.approx(covered_dl / sel.total_downloads)


def test_coverage_target_adds_popular_signatures():
    rows = [
        model("a", 100, attention="gqa-4", activation="silu"),
        model("b", 90, attention="gqa-4", activation="gelu"),
        model("c", 1000, attention="gqa-4", activation="silu", dtype="bfloat16"),
        model("d", 5, attention="gqa-4", activation="gelu", dtype="bfloat16"),
    ]
    frame = pd.DataFrame(rows)
    plain = select(frame)
    more = select(frame, coverage_target=1.0)
    assert more.download_weighted_coverage == pytest.approx(1.0)
    assert len(more.representatives) > len(plain.representatives)
    assert plain.download_weighted_coverage < 1.0


def test_write_and_load_representatives_as_model_specs(tmp_path):
    from contracts.records import ModelSpec

    sel = select(population())
    write_selection(tmp_path, sel)
    df = pd.read_parquet(tmp_path / "representatives.parquet")
    assert {
        "id",
        "model_type",
        "architecture",
        "config",
        "downloads",
        "covers",
        "cluster_download_share",
    } <= set(df.columns)
    summary = json.loads((tmp_path / "selection.json").read_text())
    assert summary["representatives"] == len(sel.representatives)
    specs = load_representatives(tmp_path)
    assert all(isinstance(s, ModelSpec) for s in specs)
    assert [s.model_id for s in specs] == [r.id for r in sel.representatives]
    assert specs[0].config["model_type"] == "fam" and specs[0].architecture == "FamForCausalLM"


def test_estimate_params_needs_size_fields():
    assert estimate_params(None) == math.inf
    assert estimate_params(json.dumps({"model_type": "bert"})) == math.inf
    small = estimate_params(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10}))
    large = estimate_params(
        json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10, "num_experts": 8})
    )
    assert 0 < small < large


def test_empty_population():
    sel = select(pd.DataFrame([model("g", status="broken")]))
    assert sel.representatives == [] and sel.universe == 0


@pytest.mark.slow
def test_default_representatives_of_the_catalog_cover_every_architecture_trait(tmp_path, monkeypatch):
    """The offline catalog (no downloads): deterministic by size then id, and every type is covered."""
    from agents.catalog import iter_catalog
    from agents.select import default_cache_path, default_representatives
    from agents.traits import reset_profiles

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))  # computed here, not read from a cache
    reset_profiles()
    specs = default_representatives()
    assert default_cache_path().exists()
    assert specs and specs == default_representatives()
    ok_types = {r.model_type for r in iter_catalog() if r.status == "ok"}
    rep_types = {s.model_type for s in specs}
    assert rep_types == ok_types  # model_type is a trait: every family has a representative
    assert all(s.source == "catalog" and s.config.get("model_type") for s in specs)
    reset_profiles()


def test_default_representatives_are_read_from_the_disk_cache(tmp_path, monkeypatch):
    from agents.select import default_cache_path, default_representatives
    from agents.traits import reset_profiles

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    reset_profiles()
    row = {
        "id": "catalog/bert/BertModel",
        "model_type": "bert",
        "architecture": "BertModel",
        "config": json.dumps({"model_type": "bert"}),
        "downloads": 0,
        "source": "catalog",
    }
    default_cache_path().write_text(json.dumps([row]))
    specs = default_representatives()
    assert [(s.model_id, s.architecture, s.config, s.source) for s in specs] == [
        ("catalog/bert/BertModel", "BertModel", {"model_type": "bert"}, "catalog")
    ]
    reset_profiles()
