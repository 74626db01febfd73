"""A worker that crashes or hangs in an op: the row names the op (route call_journal), later cases
of a hanging op run alone under the short limit, and a per-case limit is never the verdict."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from harness.engine.runner import RunOptions, run_tier
from harness.engine.workers import WorkerLimits
from tests.harness.engine.conftest import TRIVIAL

OPS = "tests.harness.engine.op_tier:TIER"
CASES = [
    {"id": "add-1", "op": "add"},
    {"id": "topk-1", "op": "topk"},
    {"id": "softmax-1", "op": "softmax"},
    {"id": "add-2", "op": "add", "n": 7},
    {"id": "topk-2", "op": "topk", "n": 9},
    {"id": "topk-3", "op": "topk", "n": 10},
    {"id": "add-3", "op": "add", "n": 8},
]


@pytest.fixture
def fast_limits(monkeypatch):
    monkeypatch.setenv("HARNESS_STALL_SECONDS", "2")
    monkeypatch.setenv("HARNESS_MARKED_OP_LIMIT", "1.5")
    monkeypatch.setenv("HARNESS_CASE_LIMIT_FLOOR", "1")
    monkeypatch.delenv("HARNESS_CALL_JOURNAL", raising=False)


def _plant(tmp_path, monkeypatch, **fault):
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({"faults": [{"name": "planted", **fault}]}))
    monkeypatch.setenv("NEURON_FAULTS", str(path))  # the workers inherit it, as in a faulted run


def _run(tmp_path, tier=OPS, cases=CASES, backend="neuron", timeout=6.0, **opts):
    models = tmp_path / "cases.json"
    models.write_text(json.dumps(cases))
    summary = run_tier(
        RunOptions(
            tier=tier,
            out=tmp_path / "run",
            backend=backend,
            models=str(models),
            workers=1,
            limits=WorkerLimits(timeout=timeout),
            progress=False,
            order="listed",
            **{"use_baseline": False, **opts},
        )
    )
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet").set_index("case_id")
    outcomes = {}
    for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines():
        rec = json.loads(line)
        outcomes[rec["case_id"]] = rec["outcome"]
    return summary, rows, outcomes


@pytest.mark.parametrize("kind,status", [("hang", "timeout"), ("crash", "crash")])
def test_a_planted_hang_or_crash_is_localized_to_its_op(tmp_path, monkeypatch, fast_limits, kind, status):
    _plant(tmp_path, monkeypatch, op="aten.topk.default", kind=kind)
    summary, rows, outcomes = _run(tmp_path)
    topk = [c["id"] for c in CASES if c["op"] == "topk"]
    for case in topk:
        row = rows.loc[case]
        assert row.status == status and row.blame == "backend", (case, row.status, row.blame_evidence)
        assert row.root_cause_op == "aten.topk.default"
        rc = json.loads(row.root_cause)
        assert rc["found"] and rc["route"] == "call_journal" and rc["kind"] == kind
        assert rc["phase"] == "forward" and rc["input_dtypes"] == ["float32", None]
        assert rc["input_shapes"][0] == [next(c.get("n", 6) for c in CASES if c["id"] == case)]
        assert rc["source_line"].startswith("op_tier.py:")
    others = rows.drop(index=topk)
    assert (others.status == "pass").all() and others.root_cause.isna().all()
    # the first topk case taught the run the op: the later ones ran alone, under the journal
    limits = json.loads((tmp_path / "run" / "run.json").read_text())["tiers"]["op_cases"]["limits"]
    assert limits["marked_ops"] == {"aten.topk.default": kind}
    assert limits["alone"] == {f"marked_{kind}": 2}
    assert summary["marked_ops"] == {"aten.topk.default": kind}
    if kind == "hang":  # ... under the short limit, instead of the tier's 6 s
        assert [outcomes[c]["seconds"] for c in topk[1:]] == [1.5, 1.5]


def test_a_clean_device_gives_no_root_cause_and_runs_nothing_alone(tmp_path, monkeypatch, fast_limits):
    monkeypatch.delenv("NEURON_FAULTS", raising=False)
    summary, rows, outcomes = _run(tmp_path)
    assert summary["counts"] == {"pass": len(CASES)} and summary["marked_ops"] == {}
    assert rows.root_cause.isna().all() and rows.root_cause_op.isna().all()
    limits = json.loads((tmp_path / "run" / "run.json").read_text())["tiers"]["op_cases"]["limits"]
    assert limits["alone"] == {}
    assert not any(o["worker"].get("diagnosed") for o in outcomes.values())
    assert not list((tmp_path / "run" / "workers").glob("*spare*"))  # no spare worker was started


def test_ops_marked_before_the_run_start_it_with_their_cases_alone(tmp_path, monkeypatch, fast_limits):
    """A nightly hands the ops its earlier tiers died in to the next tier."""
    monkeypatch.delenv("NEURON_FAULTS", raising=False)
    summary, rows, outcomes = _run(tmp_path, marked_ops={"aten.add.Tensor": "hang"})
    assert summary["counts"] == {"pass": len(CASES)}  # an op that no longer hangs passes alone
    adds = [c["id"] for c in CASES if c["op"] == "add"]
    assert all(outcomes[c]["worker"].get("diagnosed") for c in adds)
    limits = json.loads((tmp_path / "run" / "run.json").read_text())["tiers"]["op_cases"]["limits"]
    assert limits["alone"] == {"marked_hang": len(adds)}


def test_a_crash_in_unit_cases_names_the_op(tmp_path, monkeypatch, fast_limits):
    """The unit tier on a registry of a few recorded cases: a crash in a chunk names the op."""
    from registry.store import Registry
    from registry.unit_tier import bundled_registry_path

    entries = list(Registry.load(bundled_registry_path()))
    pick = [e for e in entries if e.op == "aten.sort.default"][:2]
    pick += [e for e in entries if e.op == "aten.add.Tensor"][:3]
    registry = Registry(pick).save(tmp_path / "registry.parquet")
    _plant(tmp_path, monkeypatch, op="aten.sort", kind="crash", signal="SIGABRT")
    summary = run_tier(
        RunOptions(
            tier="unit",
            out=tmp_path / "run",
            registry=str(registry),
            workers=1,
            limits=WorkerLimits(timeout=30),
            progress=False,
            use_baseline=False,
        )
    )
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet").set_index("case_id")
    sort = rows[rows.index.str.startswith("aten.sort.default")]
    assert len(sort) == 2 and (sort.status == "crash").all() and (sort.blame == "backend").all()
    assert (sort.root_cause_op == "aten.sort.default").all()
    for text in sort.root_cause:
        rc = json.loads(text)
        assert rc["route"] == "call_journal" and rc["kind"] == "crash" and rc["phase"] == "forward"
        assert "SIGABRT" in rc["why"]
    assert (rows.drop(index=sort.index).status == "pass").all()
    assert summary["counts"] == {"crash": 2, "pass": 3}


def test_a_case_killed_at_its_own_limit_is_judged_under_the_tier_limit(tmp_path, fast_limits):
    """The per-case limit (3 x the baseline's 0.05 s, floor 1 s) makes a hang cheap; a case that is
    only slower than in the baseline is re-run under the tier's limit and passes. A case the
    baseline does not know keeps the tier's limit."""
    from contracts.rows import result_row
    from reports.tables import write_run_tables

    baseline = tmp_path / "baseline"
    rows = [
        {"tier": "trivial", "case_id": c, "stage": s, "status": "pass", "seconds": 0.05}
        for c in ("slow", "hang")
        for s in ("run", "check")
    ]
    write_run_tables(baseline, {"run_id": "b", "backend": "cpu"}, [result_row(r, "b") for r in rows], [], {})
    cases = [
        {"id": "slow", "action": "sleep:2"},
        {"id": "hang", "action": "hang"},
        {"id": "new", "action": "hang"},
    ]
    summary, rows, outcomes = _run(
        tmp_path, tier=TRIVIAL, cases=cases, backend="cpu", timeout=4.0, baseline=str(baseline)
    )
    assert rows.loc["slow"].status.tolist() == ["pass", "pass"]
    assert outcomes["slow"]["worker"]["first_attempt"]["limit"] == 1.0
    assert outcomes["hang"]["worker"]["first_attempt"]["limit"] == 1.0
    assert outcomes["new"]["worker"]["first_attempt"]["limit"] == 4.0  # the tier's
    for case in ("hang", "new"):  # judged under the tier's limit: 4 s
        assert rows.loc[case].status.tolist() == ["timeout", "timeout"]
        assert outcomes[case]["seconds"] == 4.0
        rc = outcomes[case]["stages"][0]["root_cause"]
        assert not rc["found"] and "before entering any op call" in rc["why"]  # a sleep calls no op


@pytest.mark.slow
def test_a_nightly_hands_the_ops_its_tiers_died_in_to_the_tiers_after(tmp_path, monkeypatch, fast_limits):
    from harness.engine.nightly import NightlyOptions, run_nightly

    _plant(tmp_path, monkeypatch, op="aten.topk.default", kind="crash")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(CASES))
    config = tmp_path / "nightly.toml"
    first, then = "tests.harness.engine.op_tier:TIER", "tests.harness.engine.op_tier:AGAIN"
    config.write_text(
        f'[quick]\ntiers = ["{first}", "{then}"]\n'
        f'["quick"."{first}"]\nmodels = "{cases}"\ntimeout = 20\n'
        f'["quick"."{then}"]\nmodels = "{cases}"\ntimeout = 20\n'
    )
    night = run_nightly(
        NightlyOptions(
            out=tmp_path / "night",
            quick=True,
            backend="neuron",
            progress=False,
            config_path=str(config),
            use_baseline=False,
            order="listed",
        )
    )
    assert night["tiers"]["op_cases"]["marked_ops"] == {"aten.topk.default": "crash"}
    later = json.loads((tmp_path / "night" / "op_cases_again" / "run.json").read_text())
    limits = later["tiers"]["op_cases_again"]["limits"]
    assert limits["alone"] == {"marked_crash": 3}  # every topk case alone, the first one too
    rows = pd.read_parquet(tmp_path / "night" / "op_cases_again" / "results.parquet")
    assert (rows[rows.case_id.str.startswith("topk")].root_cause_op == "aten.topk.default").all()


def test_the_reference_re_run_only_blames_it_never_diagnoses(tmp_path, fast_limits):
    """A case that dies on the reference too is blamed by that death, not re-run under the journal."""
    summary, rows, outcomes = _run(
        tmp_path, tier=TRIVIAL, cases=[{"id": "h", "action": "hang"}], backend="neuron", timeout=2.0
    )
    assert outcomes["h"]["worker"]["first_attempt"]["died"] == "worker_timeout"  # the device's: re-run
    line = (tmp_path / "run" / "reference" / "journal.jsonl").read_text().splitlines()[0]
    reference = json.loads(line)["outcome"]
    assert reference["worker"]["died"] == "worker_timeout" and "first_attempt" not in reference["worker"]
    assert (rows.blame == "harness").all() and rows.root_cause.isna().all()  # the cpu hangs too
