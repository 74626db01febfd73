"""Where a run's time goes: worker start-up and code-marked phases in the journal, the runner's
and the nightly's wall times in run.json / nightly.json, and benchmarks/nightly_time.py's split.
Times are only accounted here, never asserted as speed."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from benchmarks import nightly_time as nt
from harness.engine.nightly import NightlyOptions, run_nightly
from harness.engine.runner import RunOptions, run_tier
from tests.harness.engine.conftest import CHUNKED, TRIVIAL


def _outcomes(run_dir):
    return [json.loads(line)["outcome"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("tier", [TRIVIAL, CHUNKED])
def test_each_worker_start_is_journaled_once_and_phases_per_case(tmp_path, case_file, tier):
    cases = case_file(
        [(f"s{i}", "phase:shrink") for i in range(5)] + [("r", "phase:reference"), ("p", "pass")]
    )
    run_dir = tmp_path / "run"
    run_tier(
        RunOptions(
            tier=tier, out=run_dir, backend="cpu", models=cases, workers=2, progress=False, use_baseline=False
        )
    )
    outcomes = _outcomes(run_dir)
    starts = defaultdict(int)
    for o in outcomes:
        starts[o["worker"]["pid"]] += "startup_seconds" in o["worker"]
    assert set(starts.values()) == {1}  # each worker process: its start-up counted with exactly one case
    by_id = {o["case_id"]: o["worker"].get("phases", {}) for o in outcomes}
    if tier == TRIVIAL:  # one case per call: each case its own phase
        assert all(set(by_id[f"s{i}"]) == {"shrink"} for i in range(5))
        assert set(by_id["r"]) == {"reference"} and by_id["p"] == {}
    else:  # a chunk's phases are shared out over its cases
        assert all(set(p) <= {"shrink", "reference"} for p in by_id.values())
        assert any("shrink" in p for p in by_id.values())
    meta = json.loads((run_dir / "run.json").read_text())
    timings = next(iter(meta["tiers"].values()))["timings"]
    assert {
        "list_seconds",
        "probe_seconds",
        "reference_seconds",
        "tables_seconds",
        "summary_seconds",
        "wall_seconds",
    } <= set(timings)


def test_a_case_is_split_into_phases_stages_and_harness_time():
    outcome = {
        "seconds": 10.0,
        "stages": [
            {"stage": "load", "seconds": 3.0},
            {"stage": "forward", "seconds": 2.0},
            {"stage": "numerics", "seconds": 1.5},
            {"stage": "compile", "seconds": 2.0},
        ],
        "worker": {"startup_seconds": 4.0, "phases": {"shrink": 1.0, "reference": 0.5, "blame": 0.25}},
    }
    got = nt.case_seconds(outcome)
    assert got["startup"] == 4.0 and got["shrinking"] == 1.0 and got["blame_probes"] == 0.25
    assert got["references"] == 2.0  # reference phase + the numerics stage
    assert got["eager"] == 4.0  # load + forward, less the shrinking inside load
    assert got["compile"] == 2.0 and got["harness"] == pytest.approx(10.0 - 1.0 - 2.0 - 0.25 - 2.0 - 4.0)
    unit = {
        "seconds": 1.0,
        "stages": [{"stage": "op", "seconds": 0.8}],
        "worker": {"phases": {"reference": 0.3}},
    }
    assert nt.case_seconds(unit)["eager"] == pytest.approx(0.5)  # the unit tier's CPU op is a reference


def test_the_nightly_records_its_times_and_nightly_time_splits_them(tmp_path, case_file):
    cases = case_file([("a", "pass"), ("b", "phase:shrink"), ("c", "fail")])
    config = tmp_path / "nightly.toml"
    config.write_text(
        f'[quick]\ntiers = ["{TRIVIAL}", "{CHUNKED}"]\n["quick"."{TRIVIAL}"]\nmodels = "{cases}"\n'
        f'["quick"."{CHUNKED}"]\nmodels = "{cases}"\n'
    )
    night = tmp_path / "night"
    result = run_nightly(
        NightlyOptions(
            out=night,
            quick=True,
            backend="cpu",
            workers=2,
            progress=False,
            config_path=str(config),
            use_baseline=False,
        )
    )
    timings = json.loads((night / "nightly.json").read_text())["timings"]
    assert set(timings["tiers"]) == {"trivial", "trivial_chunked"}
    assert timings["seconds"] >= timings["report_seconds"] >= 0 and result["seconds"] == timings["seconds"]

    summary = nt.summarize(night, 2, {}, wall=None, quick=True)
    assert set(summary["tiers"]) == {"trivial", "trivial_chunked"}
    assert all(t["cases"] == 3 for t in summary["tiers"].values())
    assert set(summary["shares"]) == set(nt.CATEGORIES)
    assert sum(summary["shares"].values()) == pytest.approx(1.0, abs=1e-3)
    assert summary["seconds"]["device_overhead"] == 0.0  # no cpu side run: no overhead is claimed
    assert not any(t["device_overhead_measured"] for t in summary["tiers"].values())
    assert summary["targets"]["quick_nightly_cold_minutes"]["target"] == nt.TARGET_QUICK_COLD_MINUTES


def test_the_cpu_side_representative_tier_loads_and_runs_exactly_its_seeded_sample(tmp_path, monkeypatch):
    """nightly_time's cpu side runs `--tier nightly_time:...` (benchmarks/ on the path, as its
    subprocess has it) on the neuron run's own sample: the plug-in loads and lists nothing."""
    from pathlib import Path

    from contracts.records import Case
    from contracts.status import FULL_STAGES
    from contracts.tiers import load_tier
    from harness.engine.runner import list_cases

    monkeypatch.syspath_prepend(str(Path(nt.__file__).parent))
    tier = load_tier(nt.EAGER_REPRESENTATIVE_REF)
    assert tier.name == "representative" and tier.stages == FULL_STAGES and tier.chunk_size == 1
    sample = [{"case_id": f"m{i}", "tier": "representative", "payload": {"x": i}} for i in range(3)]
    run_dir = tmp_path / "cpu" / "representative"
    run_dir.mkdir(parents=True)
    inputs = {"limit": 4, "registry": None, "models": None}
    nt._seed_cases(run_dir, "representative", nt.EAGER_REPRESENTATIVE_REF, sample, inputs)
    opts = RunOptions(tier=nt.EAGER_REPRESENTATIVE_REF, out=run_dir, backend="cpu", limit=4)
    monkeypatch.setattr(tier, "cases", lambda inputs: pytest.fail("listed instead of running the sample"))
    assert [c.case_id for c in list_cases(tier, opts, run_dir)] == ["m0", "m1", "m2"]
    assert all(isinstance(c, Case) for c in list_cases(tier, opts, run_dir))


def test_a_killed_case_counts_its_time_once():
    """A timed-out case reports the timeout on every stage; the split counts it once."""
    outcome = {
        "seconds": 900.0,
        "stages": [{"stage": s, "seconds": 900.0} for s in ("load", "forward", "backward")],
        "worker": {"died": "worker_timeout"},
    }
    got = nt.case_seconds(outcome)
    assert got == {"startup": 0.0, "killed_cases": 900.0}
    assert "killed_cases" in nt.CATEGORIES


def test_a_sampled_night_runs_one_shard_of_each_tier_and_estimates_the_whole(tmp_path, case_file):
    """`shard = "1/N"` in a tier's nightly settings runs that shard only (as `harness run --shard`);
    nightly_time's estimate keeps once-per-tier costs and scales the per-case rest by N."""
    from harness.engine.runner import in_shard

    ids = [f"c{i}" for i in range(12)]
    cases = case_file([(i, "pass") for i in ids])
    config = tmp_path / "nightly.toml"
    config.write_text(
        f'[quick]\ntiers = ["{TRIVIAL}"]\n["quick"."{TRIVIAL}"]\nmodels = "{cases}"\nshard = "1/3"\n'
    )
    night = tmp_path / "night"
    run_nightly(
        NightlyOptions(
            out=night,
            quick=True,
            backend="cpu",
            workers=1,
            progress=False,
            config_path=str(config),
            use_baseline=False,
        )
    )
    ran = {o["case_id"] for o in _outcomes(night / "trivial")}
    assert ran == {i for i in ids if in_shard(i, (1, 3))} and 0 < len(ran) < len(ids)

    summary = nt.summarize(night, 1, {}, wall=None, quick=None)
    est = nt.estimate(summary, 3)
    secs = summary["tiers"]["trivial"]["seconds"]
    once = sum(secs[k] for k in nt.ONCE_PER_TIER)
    assert est["tiers"]["trivial"]["cases"] == 3 * len(ran)
    assert est["tiers"]["trivial"]["seconds"] == pytest.approx(
        once + 3 * (sum(secs.values()) - once), abs=0.1
    )
    assert est["seconds"] == pytest.approx(
        est["tiers"]["trivial"]["seconds"] + 3 * summary["report_seconds"], abs=0.1
    )


def test_sample_config_shards_every_tier_of_the_full_night(tmp_path):
    import tomllib

    from harness.engine.nightly import load_config

    full = load_config(False)
    sampled_path = nt.sample_config(tmp_path / "s.toml", 10)
    sampled = tomllib.loads(sampled_path.read_text())["full"]
    assert tuple(sampled["tiers"]) == full.tiers
    for name in full.tiers:
        assert sampled[name] == {**full.tier(name).model_dump(exclude_none=True), "shard": "1/10"}
    assert load_config(False, sampled_path).tier("unit").shard == "1/10"  # the nightly reads it back
