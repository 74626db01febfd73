"""Likely failures first (harness.engine.ordering): tested by the order it produces, never by speed."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from contracts.records import Case
from harness.engine import ordering
from harness.engine.ordering import BaselineFacts, Changed, OpIndex, changed_ops, op_keys, order_cases
from harness.engine.runner import RunOptions, in_shard, run_tier
from tests.harness.engine.conftest import TRIVIAL


def unit(case_id: str, op: str, weight: float = 0.0) -> Case:
    return Case(case_id=case_id, tier="unit", payload={"op": op}, model_ids=[f"m-{case_id}"], weight=weight)


def model(
    case_id: str, model_type: str, model_ids: list[str], weight: float = 0.0, tier: str = "full"
) -> Case:
    return Case(
        case_id=case_id,
        tier=tier,
        payload={"spec": {"model_id": model_ids[0], "model_type": model_type}},
        model_ids=model_ids,
        weight=weight,
    )


def ids(cases):
    return [c.case_id for c in cases]


def fp(shared="s", **ops):
    return {"version": 1, "shared": shared, "ops": ops}


# ------------------------------------------------------------------------------ changed ops


def test_changed_ops_are_the_keys_whose_fingerprint_differs_or_appears():
    old = fp(**{"aten.mm": "1", "aten.add": "2", "aten.gone.default": "3"})
    new = fp(**{"aten.mm": "1", "aten.add": "9", "aten.new.default": "4"})
    changed = changed_ops(old, new)
    assert changed.known and not changed.everything
    assert changed.keys == {"aten.add", "aten.gone.default", "aten.new.default"}


def test_a_changed_shared_path_singles_out_no_op_and_missing_fingerprints_know_nothing():
    assert changed_ops(fp("a", **{"aten.mm": "1"}), fp("b", **{"aten.mm": "2"})).everything
    assert (
        changed_ops(fp("a", **{"aten.mm": "1"}), fp("b", **{"aten.mm": "2"})).touches(["aten.mm.default"])
        == []
    )
    assert not changed_ops(None, fp()).known and not changed_ops(fp(), None).known
    assert not changed_ops({**fp(), "version": 0}, fp()).known


def test_an_overload_matches_its_own_key_its_packet_and_its_inplace_base():
    assert op_keys("aten.add_.Tensor") == ("aten.add_.Tensor", "aten.add_", "aten.add")
    changed = Changed(frozenset({"aten.add", "aten.mm.out"}), known=True)
    assert changed.touches(
        ["aten.add.Tensor", "aten.add_.Scalar", "aten.mm.default", "aten.mm.out", "aten.addmm.default"]
    ) == ["aten.add.Tensor", "aten.add_.Scalar", "aten.mm.out"]


# ------------------------------------------------------------------------------------ order


def test_baseline_failures_then_changed_ops_then_weight_then_listing_order():
    cases = [
        unit("a", "aten.mm.default", 5),
        unit("b", "aten.add.Tensor", 1),
        unit("c", "aten.mm.default", 9),
        unit("d", "aten.relu.default", 7),
        unit("e", "aten.add.Tensor", 3),
        unit("f", "aten.relu.default", 7),
        unit("g", "aten.relu.default", 0),
    ]
    base = BaselineFacts(failing_cases={("unit", "g"), ("unit", "d")})
    changed = Changed(frozenset({"aten.add"}), known=True)
    ordered = order_cases(cases, base, changed)
    # d (7) and g (0) failed in the baseline; e (3) and b (1) touch aten.add; then c 9, f 7, a 5
    assert ids(ordered.cases) == ["d", "g", "e", "b", "c", "f", "a"]
    assert ordered.why["e"] == {"class": "changed_op", "ops": ["aten.add.Tensor"]}
    assert ordered.why["d"]["class"] == "baseline_failure" and ordered.why["a"]["class"] == "rest"
    assert ordered.summary["classes"] == {"baseline_failure": 2, "changed_op": 2, "rest": 3}
    assert sorted(ids(ordered.cases)) == sorted(ids(cases))  # the same cases, only reordered


def test_without_a_baseline_cases_run_by_weight_in_listing_order_for_ties():
    cases = [
        unit("x", "aten.mm.default", 1),
        unit("y", "aten.mm.default", 2),
        unit("z", "aten.mm.default", 1),
    ]
    assert ids(order_cases(cases, None, Changed()).cases) == ["y", "x", "z"]


def test_model_cases_use_the_registry_ops_of_their_models_else_of_their_model_type():
    index = OpIndex(
        by_model={"catalog/bert/BertModel": frozenset({"aten.gelu.default"})},
        by_type={"llama": frozenset({"aten.silu.default"}), "bert": frozenset({"aten.gelu.default"})},
    )
    cases = [
        model("t5/1", "t5", ["catalog/t5/T5Model"], 10),
        model("llama/1", "llama", ["hub/llama-x"], 1),
        model("bert/1", "bert", ["catalog/bert/BertModel"], 0),
    ]
    changed = Changed(frozenset({"aten.silu", "aten.gelu"}), known=True)
    ordered = order_cases(cases, BaselineFacts(), changed, index)
    assert ids(ordered.cases) == ["llama/1", "bert/1", "t5/1"]
    assert ordered.why["llama/1"]["ops"] == ["aten.silu.default"]


def test_a_model_that_failed_in_another_tier_of_the_baseline_runs_first():
    cases = [model("bert/1", "bert", ["catalog/bert/A"], 5), model("gpt2/1", "gpt2", ["catalog/gpt2/B"], 1)]
    base = BaselineFacts(
        failing_cases={("representative", "catalog/gpt2/B")}, failing_models={"catalog/gpt2/B"}
    )
    assert ids(order_cases(cases, base, Changed()).cases) == ["gpt2/1", "bert/1"]


def test_the_op_index_reads_the_registry_provenance(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "registry.parquet"
    pq.write_table(
        pa.table(
            {
                "op": ["aten.mm.default", "aten.gelu.default", "aten.mm.default"],
                "models": [["m1", "m2"], ["m2"], ["m3"]],
            }
        ),
        path,
    )
    index = OpIndex.from_registry(path, {"m2": "bert", "m3": "llama"})
    assert index.by_model["m2"] == {"aten.mm.default", "aten.gelu.default"}
    assert index.by_type == {"bert": {"aten.mm.default", "aten.gelu.default"}, "llama": {"aten.mm.default"}}
    assert OpIndex.from_registry(tmp_path / "missing.parquet").by_model == {}


# ---------------------------------------------------------------------------- in the runner


@dataclass
class _Opts:
    order: str = "likely-failures"
    baseline: str | None = None
    use_baseline: bool = True
    registry: str | None = None
    progress: bool = False


def _baseline_dir(tmp_path, failing: list[str], fingerprints=None):
    from reports.tables import write_run_tables

    rows = [
        {
            "run_id": "r0",
            "tier": "unit",
            "case_id": cid,
            "stage": "op",
            "status": "fail" if cid in failing else "pass",
            "model_ids": [f"m-{cid}"],
        }
        for cid in "abcdef"
    ]
    meta = {"run_id": "r0", "backend": "neuron", "started_at": "2026-01-01T00:00:00+00:00"}
    if fingerprints is not None:
        meta[ordering.FINGERPRINT_KEY] = fingerprints
    out = tmp_path / "baseline"
    write_run_tables(out, meta, rows)
    return out


def test_execution_order_reads_the_baseline_tables_and_writes_why(tmp_path):
    base = _baseline_dir(tmp_path, ["e"], fp(**{"aten.mm": "1", "aten.add": "1"}))
    cases = [
        unit(c, op, w)
        for c, op, w in [
            ("a", "aten.mm.default", 3),
            ("b", "aten.add.Tensor", 2),
            ("c", "aten.add.Tensor", 1),
            ("e", "aten.relu.default", 0),
        ]
    ]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    got = ordering.execution_order(
        "unit", cases, _Opts(baseline=str(base)), run_dir, fp(**{"aten.mm": "1", "aten.add": "2"})
    )
    assert ids(got) == ["e", "b", "c", "a"]
    why = json.loads((run_dir / "order-unit.json").read_text())
    assert [c["class"] for c in why["cases"]] == ["baseline_failure", "changed_op", "changed_op", "rest"]
    assert why["summary"]["changed_ops"] == ["aten.add"]
    assert ids(
        ordering.execution_order("unit", cases, _Opts(order="listed", baseline=str(base)), run_dir, None)
    ) == ["a", "b", "c", "e"]
    with pytest.raises(ValueError, match="unknown order"):
        ordering.execution_order("unit", cases, _Opts(order="fastest"), run_dir, None)


def test_a_damaged_baseline_orders_like_no_baseline(tmp_path, capsys):
    bad = tmp_path / "baseline"
    bad.mkdir()
    (bad / "results.parquet").write_text("not parquet")
    assert ordering.load_baseline(bad) is None
    assert "cannot be read" in capsys.readouterr().err
    assert ordering.load_baseline(tmp_path / "nothing") is None


def _journal_order(run_dir):
    return [json.loads(line)["case_id"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def _results(run_dir):
    import pandas as pd

    df = pd.read_parquet(run_dir / "results.parquet")
    return sorted(zip(df.case_id, df.stage, df.status, df.reason.fillna("")))


def test_the_runner_runs_baseline_failures_first_with_the_same_results_and_shards(tmp_path, case_file):
    cases = case_file([(f"c{i}", "fail" if i in (4, 7) else "pass") for i in range(9)])
    first = tmp_path / "first"
    run_tier(
        RunOptions(tier=TRIVIAL, out=first, backend="cpu", models=cases, progress=False, use_baseline=False)
    )
    assert _journal_order(first) == [f"c{i}" for i in range(9)]  # no baseline: listing order
    ordered = tmp_path / "ordered"
    run_tier(
        RunOptions(
            tier=TRIVIAL, out=ordered, backend="cpu", models=cases, progress=False, baseline=str(first)
        )
    )
    assert _journal_order(ordered)[:2] == ["c4", "c7"]
    assert sorted(_journal_order(ordered)) == sorted(_journal_order(first))
    assert _results(ordered) == _results(first)
    # a shard keeps exactly its cases whatever the order
    shard = tmp_path / "shard"
    run_tier(
        RunOptions(
            tier=TRIVIAL,
            out=shard,
            backend="cpu",
            models=cases,
            progress=False,
            baseline=str(first),
            shard=(1, 2),
        )
    )
    assert sorted(_journal_order(shard)) == sorted(f"c{i}" for i in range(9) if in_shard(f"c{i}", (1, 2)))


def test_fingerprints_of_a_backend_without_them_are_none():
    assert ordering.fingerprints_of("cpu") is None
    assert ordering.collect_fingerprints(None) is None


def test_the_probe_is_waited_for_only_when_the_baseline_has_fingerprints_to_compare(tmp_path):
    cases = [unit("a", "aten.mm.default", 2), unit("b", "aten.add.Tensor", 1)]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    asked = []

    def probe():
        asked.append(1)
        return fp(**{"aten.mm": "1", "aten.add": "2"})

    without = _baseline_dir(tmp_path / "plain", ["e"])  # a baseline recorded without fingerprints
    ordering.execution_order("unit", cases, _Opts(baseline=str(without)), run_dir, probe)
    ordering.execution_order("unit", cases, _Opts(order="listed", baseline=str(without)), run_dir, probe)
    assert asked == []  # nothing to compare with: the first case does not wait for the probe
    with_fp = _baseline_dir(tmp_path / "fp", ["e"], fp(**{"aten.mm": "1", "aten.add": "1"}))
    got = ordering.execution_order("unit", cases, _Opts(baseline=str(with_fp)), run_dir, probe)
    assert asked == [1] and ids(got) == ["b", "a"]  # aten.add changed: b first
