"""The Ray executor runs the same work in the same isolated workers: the same results as local."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits
from tests.harness.engine.conftest import CHUNKED, TRIVIAL

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CASES = [
    ("p1", "pass"),
    ("f1", "fail"),
    ("r1", "raise"),
    ("s1", "segv"),
    ("h1", "hang"),
    ("m1", "memerror"),
    ("p2", "pass"),
    ("p3", "pass"),
]


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    yield ray
    ray.shutdown()


def _statuses(out):
    df = pd.read_parquet(out / "results.parquet")
    df = df.fillna({"reason": "", "error_class": ""})
    return {(r.case_id, r.stage): (r.status, r.reason, r.error_class) for r in df.itertuples()}


@pytest.mark.parametrize("tier", [TRIVIAL, CHUNKED], ids=["single", "chunked"])
def test_ray_executor_matches_local(local_ray, tmp_path, case_file, tier):
    models = case_file(CASES)
    results = {}
    for executor in ("local", "ray"):
        out = tmp_path / executor
        summary = run_tier(
            RunOptions(
                tier=tier,
                out=out,
                backend="cpu",
                models=models,
                workers=2,
                executor=executor,
                limits=WorkerLimits(timeout=3),
                progress=False,
            )
        )
        assert summary["executor"] == executor and summary["cases"] == len(CASES)
        results[executor] = _statuses(out)
    assert results["ray"] == results["local"]
    assert results["ray"][("s1", "run")][0] == "crash" and results["ray"][("h1", "run")][0] == "timeout"
