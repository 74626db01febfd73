"""Chunks that land early: the first chunks ramp up from one case (harness.engine.chunks.chunk_cases), and
a chunk that died is re-run case by case with each row handed on as its case finishes
(IsolatedWorker.run_chunk's emit) - so a likely failure run first is known, and stops a fail-fast
run, after its own case, not after a whole chunk. Tested by what ran and in which groups, not by
time."""

from __future__ import annotations

from contracts.records import Case
from harness.engine.chunks import chunk_cases
from harness.engine.executors.local import LocalExecutor
from harness.engine.journal import Journal
from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits
from tests.harness.engine.conftest import CHUNKED


def test_chunks_ramp_up_from_one_case_and_keep_every_case_in_order():
    cases = list(range(200))
    chunks = chunk_cases(cases, 64)
    assert [len(c) for c in chunks] == [1, 2, 4, 8, 16, 32, 64, 64, 9]
    assert [x for c in chunks for x in c] == cases
    assert [len(c) for c in chunk_cases(cases[:5], 1)] == [1] * 5
    assert [len(c) for c in chunk_cases(cases[:10], 4)] == [1, 2, 4, 3]
    assert chunk_cases([], 64) == []


def _run(out, models, **kw):
    return run_tier(
        RunOptions(
            tier=CHUNKED,
            out=out,
            backend="cpu",
            models=models,
            workers=1,
            progress=False,
            order="listed",
            limits=WorkerLimits(timeout=60),
            **kw,
        )
    )


def test_a_regression_in_the_first_case_stops_fail_fast_before_a_whole_chunk_ran(tmp_path, case_file):
    ids = [f"c{i}" for i in range(8)]
    baseline = tmp_path / "baseline"
    _run(baseline, case_file([(i, "pass") for i in ids], "clean.json"))
    broken = case_file([(i, "fail" if i == "c0" else "pass") for i in ids], "broken.json")
    got = _run(tmp_path / "run", broken, baseline=str(baseline), maxfail=1)
    assert got["stopped"]["regressions"][0]["case_id"] == "c0"
    assert Journal(tmp_path / "run").done("trivial_chunked") == {"c0"}  # not the chunk of 4 it was in


def test_a_dead_chunks_rows_land_case_by_case_the_hang_before_the_rest_reruns():
    cases = [
        Case(case_id=i, tier="trivial_chunked", payload={"action": a}, model_ids=[i])
        for i, a in (("p0", "pass"), ("hang", "hang"), ("p1", "pass"), ("p2", "pass"))
    ]
    landed: list[list[tuple[str, str]]] = []
    executor = LocalExecutor(CHUNKED, "cpu", 1, WorkerLimits(timeout=3.0))
    executor.run([(cases, True)], lambda outs: landed.append([(o.case_id, o.status) for o in outs]))
    # the chunk died on the hang and was re-run case by case: each row was handed on alone, the
    # timeout before p1 and p2 were re-run (before this, all four landed together after the re-run)
    assert landed == [[("p0", "pass")], [("hang", "timeout")], [("p1", "pass")], [("p2", "pass")]]
