"""The built-in tiers (unit, representative, full) through the runner: worker processes, journal,
Parquet tables and the summary, on inputs small enough for a test."""

from __future__ import annotations

import json
from importlib import resources

import pandas as pd
import pytest

from agents.store import ModelRecord, write_store
from contracts.status import FULL_STAGES, MODEL_STAGES, STATUS_VALUES
from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits

TINY_GPT2 = {
    "model_type": "gpt2",
    "n_layer": 1,
    "n_embd": 32,
    "n_head": 2,
    "n_positions": 64,
    "vocab_size": 128,
    "architectures": ["GPT2LMHeadModel"],
}


def _results(run_dir) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "results.parquet")


def test_unit_tier_replays_registry_cases_in_chunks(tmp_path):
    registry = str(resources.files("registry").joinpath("data/sample.parquet"))
    out = tmp_path / "unit"
    summary = run_tier(
        RunOptions(
            tier="unit",
            out=out,
            backend="neuron",
            registry=registry,
            limit=40,
            progress=False,
            limits=WorkerLimits(timeout=300.0),
        )
    )
    df = _results(out)
    assert summary["tier"] == "unit" and summary["cases"] == 40 == len(df) == df["case_id"].nunique()
    assert set(df["stage"]) == {"op"} and set(df["status"]) <= set(STATUS_VALUES)
    assert sum(summary["counts"].values()) == 40 and summary["counts"].get("pass", 0) > 30
    assert df["failing_op"].isna().sum() + df["failing_op"].notna().sum() == 40
    native = [json.loads(m).get("native") for m in df["metrics"]]
    assert set(native) <= {True, False} and native.count(True) > 30  # did the op run on the device
    runs = pd.read_parquet(out / "runs.parquet")
    assert runs["lowering_table_version"].iloc[0]  # reported by the workers' adapter


def test_full_tier_dedupes_the_population_and_keeps_the_unrunnable(tmp_path):
    store = tmp_path / "crawl"
    config = json.dumps(TINY_GPT2)
    write_store(
        store,
        [
            ModelRecord(
                id="org/gpt2-a",
                source="hub",
                downloads=70,
                model_type="gpt2",
                architectures=["GPT2LMHeadModel"],
                config=config,
                config_level="full",
            ),
            ModelRecord(
                id="org/gpt2-b",
                source="hub",
                downloads=30,
                model_type="gpt2",
                architectures=["GPT2LMHeadModel"],
                config=config,
                config_level="full",
            ),
            ModelRecord(
                id="org/broken", source="hub", downloads=5, status="broken", broken_reason="no_config"
            ),
        ],
    )
    out = tmp_path / "full"
    summary = run_tier(
        RunOptions(
            tier="full",
            out=out,
            backend="cpu",
            models=str(store),
            progress=False,
            limits=WorkerLimits(timeout=300.0),
        )
    )
    df = _results(out)
    assert summary["cases"] == 2 and summary["models"] == 3 and summary["weight"] == 105.0
    gpt2 = df[df["case_id"] != "not_attempted/no_config"]
    assert list(gpt2["stage"]) == list(FULL_STAGES) and set(gpt2["status"]) == {"pass"}
    assert (
        gpt2["model_ids"].iloc[0].tolist() == ["org/gpt2-a", "org/gpt2-b"] and gpt2["weight"].iloc[0] == 100.0
    )
    broken = df[df["case_id"] == "not_attempted/no_config"]
    assert set(broken["status"]) == {"not_attempted"} and set(broken["reason"]) == {"no_config"}
    assert (
        summary["coverage"]["forward"]["models_pass"] == 2
        and summary["coverage"]["forward"]["models_total"] == 3
    )


@pytest.mark.slow
def test_representative_tier_runs_every_stage_of_the_selected_models(tmp_path):
    selection = tmp_path / "selection"
    selection.mkdir()
    pd.DataFrame(
        [
            {
                "id": "org/tiny-gpt2",
                "model_type": "gpt2",
                "architecture": "GPT2LMHeadModel",
                "config": json.dumps(TINY_GPT2),
                "downloads": 10,
                "source": "hub",
            }
        ]
    ).to_parquet(selection / "representatives.parquet")
    out = tmp_path / "rep"
    summary = run_tier(
        RunOptions(
            tier="representative",
            out=out,
            backend="neuron",
            models=str(selection),
            progress=False,
            limits=WorkerLimits(timeout=600.0),
        )
    )
    df = _results(out)
    assert summary["cases"] == 1 and list(df["stage"]) == list(MODEL_STAGES)
    statuses = dict(zip(df["stage"], df["status"]))
    assert {statuses[s] for s in ("load", "forward", "backward", "numerics")} == {"pass"}, df[
        ["stage", "reason"]
    ]
    assert statuses["compile"] == "pass" and df.loc[df["stage"] == "compile", "graphs"].iloc[0] >= 1
    assert statuses["on_device"] in ("pass", "fail")  # fail names the ops that fell back
    assert df["traits"].notna().all() and json.loads(df["traits"].iloc[0])["model_type"] == "gpt2"
