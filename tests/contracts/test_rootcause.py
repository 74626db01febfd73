"""The root-cause record round-trips through JSON and lands in the results columns."""

from __future__ import annotations

import json

from contracts.records import CaseOutcome, StageResult
from contracts.rootcause import Mismatch, Repro, RootCause
from contracts.rows import case_rows


def _found() -> RootCause:
    return RootCause(
        found=True,
        op="aten.gelu.default",
        phase="backward",
        kind="mismatch",
        route="eager_shadow",
        call_index=7,
        input_shapes=[[2, 8], None],
        input_dtypes=["float32", None],
        input_strides=[[8, 1], None],
        mismatch=Mismatch("0", 0.02, 0.5, 1e-5, 1.3e-6, "float32", [2, 8], "float32"),
        module_path="encoder.layer.0.intermediate",
        source_line="modeling_bert.py:120 in forward",
        repro=Repro(path="repros/test_gelu.py", registry_key="aten.gelu.default/abc", verified=True),
    )


def test_a_record_round_trips_and_says_whether_its_repro_verified():
    rc = _found()
    d = json.loads(json.dumps(rc.to_dict()))
    assert d["repro_verified"] is True
    assert RootCause.from_dict(d) == rc


def test_the_row_gets_the_op_column_and_the_record_as_json():
    stage = StageResult("numerics", "fail", reason="grad off", blame="backend").to_dict()
    stage["root_cause"] = _found().to_dict()
    outcome = CaseOutcome(case_id="bert", tier="representative", stages=[stage], model_ids=["bert"])
    (row,) = case_rows(outcome, "r1").rows
    assert row.root_cause_op == "aten.gelu.default"
    assert json.loads(row.root_cause)["module_path"] == "encoder.layer.0.intermediate"


def test_not_found_is_a_record_with_why_and_no_op():
    stage = StageResult("numerics", "fail", reason="x", blame="backend").to_dict()
    stage["root_cause"] = RootCause.not_found(
        "time limit 60 s reached", seconds=60.0, gave_up="time"
    ).to_dict()
    (row,) = case_rows(CaseOutcome(case_id="c", tier="t", stages=[stage]), "r1").rows
    assert row.root_cause_op is None
    assert json.loads(row.root_cause)["why"] == "time limit 60 s reached"
    plain = StageResult("forward", "pass").to_dict()
    (row,) = case_rows(CaseOutcome(case_id="c", tier="t", stages=[plain]), "r1").rows
    assert row.root_cause is None and row.root_cause_op is None
