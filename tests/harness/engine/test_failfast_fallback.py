"""Fail-fast counts what `harness compare` gates on by default: a unit case that gains a CPU
fallback (a lost lowering: `kind: fallback`) is a regression although it still passes."""

from __future__ import annotations

import torch

from contracts.backends import get_backend
from contracts.records import CaseOutcome
from harness.engine.failfast import StopAtRegressions, gated_regressions, outcome_frame
from registry.encoding import encode_args, signature
from registry.replay import CaseSpec, replay


def _gelu_case(neuron) -> CaseOutcome:
    a, k = encode_args((torch.randn(4, 8),), {})
    result = replay(CaseSpec("aten.gelu.default", signature(a, k), {}), neuron, neuron.precision_mode())
    return CaseOutcome(case_id="gelu-0", tier="unit", stages=[result.to_dict()])


def test_a_planted_lost_lowering_makes_a_passing_unit_case_a_fallback_regression():
    from backend import faults

    neuron = get_backend("neuron")
    clean = _gelu_case(neuron)
    assert clean.stages[0]["status"] == "pass" and clean.stages[0]["metrics"]["native"] is True
    baseline = outcome_frame([clean])
    try:
        with faults.planted(name="gelu-lost", op="aten.gelu.default", kind="fallback"):
            lost = _gelu_case(neuron)
    finally:
        faults.clear()
    # still a pass: only the recorded fallback op tells the lowering is gone
    assert (
        lost.stages[0]["status"] == "pass"
        and "aten.gelu.default" in lost.stages[0]["metrics"]["fallback_ops"]
    )
    stop = StopAtRegressions(baseline, maxfail=1, backend="neuron")
    assert stop.add([lost]) and stop.regressions[0]["verdict"] == "FALLBACK_REGRESSION"
    assert "aten.gelu.default" in stop.regressions[0]["detail"]
    # a clean run against the clean baseline is no regression
    assert gated_regressions(outcome_frame([_gelu_case(neuron)]), baseline, "neuron") == []


def test_a_changed_failure_is_a_regression_and_the_same_failure_is_not():
    def case(error_class):
        return CaseOutcome(
            case_id="c",
            tier="unit",
            stages=[
                {
                    "stage": "op",
                    "status": "error",
                    "reason": "op raised on the backend",
                    "error_class": error_class,
                    "failing_op": "aten.mm.default",
                    "metrics": {"fallback_ops": []},
                }
            ],
        )

    baseline = outcome_frame([case("RuntimeError")])
    assert gated_regressions(outcome_frame([case("RuntimeError")]), baseline, "neuron") == []
    (got,) = gated_regressions(outcome_frame([case("KeyError")]), baseline, "neuron")
    assert got["verdict"] == "FAIL" and got["detail"].startswith("changed failure")
