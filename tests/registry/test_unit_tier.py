"""The runner's interface: cases() with stable ids, execute()/execute_many() that never raise."""

from __future__ import annotations

import pytest

from registry import unit_tier


@pytest.fixture(scope="module")
def registry_file(tmp_path_factory, bert_registry):
    return str(bert_registry.save(tmp_path_factory.mktemp("reg") / "r.parquet"))


def test_cases_are_unit_cases_with_stable_ids_and_weights(registry_file, bert_registry):
    cases = unit_tier.cases(registry_file)
    assert len(cases) == len(bert_registry)
    assert {c.case_id for c in cases} == {e.case_id for e in bert_registry}
    assert [c.case_id for c in cases] == [c.case_id for c in unit_tier.cases(registry_file)]
    assert all(c.tier == "unit" and c.weight == 10.0 and c.model_ids == ["tiny/bert"] for c in cases)


def test_execute_many_gives_one_op_result_per_payload(registry_file):
    cases = unit_tier.cases(registry_file)
    results = unit_tier.execute_many([c.payload for c in cases], "cpu")
    assert len(results) == len(cases) and all(len(r) == 1 and r[0].stage == "op" for r in results)
    statuses = {r[0].status.value for r in results}
    assert statuses <= {"pass", "skipped"}, [
        (c.case_id, r[0].reason)
        for c, r in zip(cases, results)
        if r[0].status.value not in ("pass", "skipped")
    ]
    assert sum(r[0].status.value == "pass" for r in results) >= 0.95 * len(results)


def test_garbage_payloads_and_unknown_backends_do_not_raise():
    (res,) = unit_tier.execute({"op": "aten.neg.default", "signature": "{not json"}, "cpu")
    assert res.status.value == "skipped"
    (res,) = unit_tier.execute({}, "cpu")
    assert res.status.value == "error" and res.reason
    (res,) = unit_tier.execute({"op": "aten.neg.default", "signature": '{"a":[],"k":{}}'}, "nosuchmodule:dev")
    assert res.status.value == "not_attempted" and "failed to load" in res.reason


def test_neuron_reports_native_and_fallback_ops(registry_file):
    backend = pytest.importorskip("backend")
    cases = {c.payload["op"]: c for c in unit_tier.cases(registry_file)}
    (mm,) = unit_tier.execute(cases["aten.mm.default"].payload, "neuron")
    assert mm.status.value == "pass" and mm.metrics["native"] is True and mm.metrics["fallback_ops"] == []
    # an op the device's lowering table does not list runs through the CPU fallback
    native = set(backend.lowering.current_table().native_ops())
    fallback = sorted(op for op in cases if op.rsplit(".", 1)[0] not in native and op not in native)
    assert fallback, "the tiny BERT step uses no op without a lowering"
    results = {op: unit_tier.execute(cases[op].payload, "neuron")[0] for op in fallback}
    fell_back = {op: r for op, r in results.items() if r.metrics["native"] is False}
    assert fell_back, "no op without a lowering reported a fallback"
    assert all(op in r.metrics["fallback_ops"] for op, r in fell_back.items())
    assert all((r.metrics["native"] is False) == bool(r.metrics["fallback_ops"]) for r in results.values())
