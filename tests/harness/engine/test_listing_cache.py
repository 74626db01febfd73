"""The content-keyed listing cache (harness.engine.listing_cache): a second listing of unchanged inputs is
a hit with the same cases; a change of content, limit, settings, library or code is a miss; a
damaged file is a recorded miss, never a crash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contracts.records import Case
from contracts.tiers import load_tier
from harness.engine import listing_cache as lc
from harness.engine.runner import RunOptions, list_cases

SAMPLE = Path(__file__).resolve().parents[3] / "registry" / "data" / "sample.parquet"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_LISTING_CACHE", "on")
    return tmp_path / "cache"


def _lister(n=3):
    calls = []

    def list_fn():
        calls.append(1)
        return [
            Case(case_id=f"c{i}", tier="unit", payload={"op": "aten.add", "shape": (2, i)}, weight=float(i))
            for i in range(n)
        ]

    return list_fn, calls


def test_unchanged_inputs_are_a_hit_with_the_same_cases(tmp_path, cache):
    reg = tmp_path / "reg.parquet"
    reg.write_bytes(b"registry v1")
    opts = RunOptions(tier="unit", out=tmp_path / "run", registry=str(reg), limit=3)
    list_fn, calls = _lister()
    first, rec1 = lc.cached_listing(opts, cache, True, list_fn)
    second, rec2 = lc.cached_listing(opts, cache, True, list_fn)
    assert (rec1["status"], rec2["status"], len(calls)) == ("miss", "hit", 1)
    assert first == second  # a miss hands out what a hit would (JSON types: the tuple is a list)
    assert first[1].payload["shape"] == [2, 1]
    reg.write_bytes(b"registry v1")  # rewritten, same bytes, new mtime: still the same content
    assert lc.cached_listing(opts, cache, True, list_fn)[1]["status"] == "hit"


@pytest.mark.parametrize(
    "change", ["content", "limit", "shard", "option", "backend", "env", "library", "code"]
)
def test_whatever_can_change_the_list_changes_the_key(tmp_path, cache, monkeypatch, change):
    reg = tmp_path / "reg.parquet"
    reg.write_bytes(b"registry v1")
    opts = RunOptions(
        tier="upstream", out=tmp_path / "run", registry=str(reg), limit=3, tier_options={"ops": "add"}
    )
    before = lc.cache_key(opts)
    if change == "content":
        reg.write_bytes(b"registry v2")
    elif change == "limit":
        opts.limit = 4
    elif change == "shard":
        opts.shard = (1, 2)
    elif change == "option":
        opts.tier_options = {"ops": "mul"}
    elif change == "backend":
        opts.backend = "cpu"
    elif change == "env":
        monkeypatch.setenv("HARNESS_REPLAY_MAX_NUMEL", "1024")
    elif change == "library":
        real = lc._version
        monkeypatch.setattr(lc, "_version", lambda name: "9.9" if name == "transformers" else real(name))
    else:
        monkeypatch.setattr(lc, "code_version", lambda: "another code version")
    assert lc.cache_key(opts) != before


def test_where_caches_live_and_the_worker_count_do_not_change_the_key(tmp_path, cache, monkeypatch):
    opts = RunOptions(tier="unit", out=tmp_path / "run", tier_options={"workers": 2})
    before = lc.cache_key(opts)
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path / "neff"))
    monkeypatch.setenv("HARNESS_BASELINE_DIR", str(tmp_path / "baseline"))
    opts.tier_options = {"workers": 4}
    assert lc.cache_key(opts) == before


def test_the_code_version_covers_data_files_of_the_packages():
    """The bundled registry and the data tables are part of what the key hashes."""
    stamp = lc.content_stamp(lc._ROOT / "registry")
    assert stamp == lc.content_stamp(lc._ROOT / "registry")  # deterministic
    assert SAMPLE.is_file() and lc.content_stamp(SAMPLE) != lc.content_stamp(
        lc._ROOT / "registry" / "data" / "tolerances.yaml"
    )


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b'{"format": 1, "key": "x", "cases": []}',
        b'{"format": 1, "key": "KEY", "cases": [{"nope": 1}]}',
        b"",
    ],
)
def test_a_damaged_cache_file_is_a_recorded_miss_and_is_rewritten(tmp_path, cache, capsys, damage):
    opts = RunOptions(tier="unit", out=tmp_path / "run", limit=2)
    list_fn, calls = _lister()
    lc.cached_listing(opts, cache, True, list_fn)
    (path,) = (cache / "listing").glob("unit-*.json")
    path.write_bytes(damage.replace(b"KEY", lc.cache_key(opts).encode()))
    cases, record = lc.cached_listing(opts, cache, True, list_fn)
    assert record["status"] == "corrupt" and record["error"] and len(calls) == 2
    assert [c.case_id for c in cases] == ["c0", "c1", "c2"]
    assert "listing again" in capsys.readouterr().err
    assert lc.cached_listing(opts, cache, True, list_fn)[1]["status"] == "hit"


def test_plug_in_tiers_and_a_disabled_cache_always_list(tmp_path, cache):
    opts = RunOptions(tier="mypkg.tiers:SMOKE", out=tmp_path / "run")
    list_fn, calls = _lister()
    assert lc.cached_listing(opts, cache, False, list_fn)[1]["status"] == "off"
    assert lc.cached_listing(opts, None, True, list_fn)[1]["status"] == "off"
    assert len(calls) == 2 and not (cache / "listing").exists()


def test_an_unwritable_cache_is_a_warning(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    opts = RunOptions(tier="unit", out=tmp_path / "run")
    list_fn, _ = _lister()
    cases, record = lc.cached_listing(opts, blocker, True, list_fn)
    assert record["status"] == "miss" and len(cases) == 3
    assert "cannot be written" in capsys.readouterr().err


def test_old_lists_of_a_tier_are_pruned(tmp_path, cache):
    list_fn, _ = _lister(1)
    for limit in range(lc.KEEP_PER_TIER + 3):
        lc.cached_listing(RunOptions(tier="unit", out=tmp_path, limit=limit), cache, True, list_fn)
    lc.cached_listing(RunOptions(tier="full", out=tmp_path), cache, True, list_fn)
    assert len(list((cache / "listing").glob("unit-*.json"))) == lc.KEEP_PER_TIER
    assert len(list((cache / "listing").glob("full-*.json"))) == 1


@pytest.mark.slow  # imports torch for the real unit tier (~25 s at load 12)
def test_the_unit_tier_lists_once_then_comes_from_the_cache(tmp_path, cache, monkeypatch):
    """Through the runner's list_cases with the real unit tier: the second run directory gets the
    same cases without listing, and the run dir records hit or miss."""
    reg = tmp_path / "registry.parquet"
    shutil.copy(SAMPLE, reg)
    tier = load_tier("unit")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first_rec, second_rec = {}, {}
    first = list_cases(
        tier,
        RunOptions(tier="unit", out=tmp_path / "a", registry=str(reg), limit=20),
        tmp_path / "a",
        first_rec,
    )
    monkeypatch.setattr(tier, "cases", lambda inputs: pytest.fail("listed again"))
    second = list_cases(
        tier,
        RunOptions(tier="unit", out=tmp_path / "b", registry=str(reg), limit=20),
        tmp_path / "b",
        second_rec,
    )
    assert (first_rec["status"], second_rec["status"]) == ("miss", "hit")
    assert first == second and len(first) == 20
    saved = json.loads((tmp_path / "b" / "cases-unit.json").read_text())["cases"]
    assert [c["case_id"] for c in saved] == [c.case_id for c in first]
