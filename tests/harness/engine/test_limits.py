"""Per-case limits from the baseline's seconds, and the cases of ops known to hang or crash run
alone (harness.engine.limits). The worker side of both is tested in test_death_root_cause."""

from __future__ import annotations

import pytest

from contracts.records import Case, CaseOutcome
from contracts.rows import result_row
from harness.engine.limits import (
    BaselineCosts,
    LimitSettings,
    Schedule,
    baseline_costs,
    case_label,
    marks_of,
    op_keys,
)

SETTINGS = LimitSettings(factor=3.0, floor=10.0, marked=5.0, stall=10.0, journal=True, localize=0.0)


def _unit(case_id: str, op: str) -> Case:
    return Case(case_id, "unit", {"op": op, "signature": "[]"})


def _upstream(case_id: str, op: str) -> Case:
    return Case(case_id, "upstream", {"info": {"op": op, "variant": "", "dtype": "float32", "sample": 0}})


def _model(case_id: str) -> Case:
    return Case(case_id, "representative", {"spec": {"model_id": case_id, "model_type": "m"}}, [case_id])


def test_a_case_gets_a_multiple_of_what_it_cost_between_a_floor_and_the_tier_limit():
    costs = BaselineCosts(seconds={"fast": 0.002, "slow": 50.0, "mid": 7.0})
    s = Schedule(120.0, costs, SETTINGS)
    assert s.limit(_unit("fast", "aten.add.Tensor")) == 10.0  # the floor: cold starts
    assert s.limit(_unit("mid", "aten.add.Tensor")) == 21.0
    assert s.limit(_unit("slow", "aten.add.Tensor")) == 120.0  # never above the tier's


def test_a_model_case_has_time_to_localize_its_failure():
    """A model case's baseline seconds were measured while it passed; a failing row is localized
    inside the case (harness.rootcause), so its limit leaves that time. An op case has nothing to
    localize and keeps the short limit."""
    costs = BaselineCosts(seconds={"m": 4.0, "u": 0.01})
    s = Schedule(900.0, costs, LimitSettings(factor=3.0, floor=30.0, localize=180.0))
    assert s.limit(_model("m")) == 30.0 + 180.0
    assert s.chunk_limit([_model("m")]) == 210.0
    assert s.limit(_unit("u", "aten.add.Tensor")) == 30.0
    assert Schedule(120.0, costs, LimitSettings(floor=30.0, localize=180.0)).limit(_model("m")) == 120.0


def test_the_model_tiers_declare_that_they_localize():
    from contracts.tiers import load_tier, tier_option

    tiers = ("representative", "full", "unit", "upstream")
    assert [tier_option(load_tier(t), "localizes") for t in tiers] == [True, True, False, False]


def test_a_case_the_baseline_does_not_know_keeps_the_tier_limit():
    s = Schedule(120.0, BaselineCosts(seconds={"known": 0.01}), SETTINGS)
    assert s.limit(_unit("new", "aten.add.Tensor")) == 120.0
    known, new = _unit("known", "aten.add.Tensor"), _unit("new", "aten.mul.Tensor")
    assert s.chunk_limit([known]) == 10.0
    assert s.chunk_limit([known, new]) == 120.0  # one unknown case: the chunk keeps the tier's limit
    assert Schedule(120.0).limit(known) == 120.0  # no baseline at all


def test_a_chunk_gets_what_its_cases_cost_together():
    costs = BaselineCosts(seconds={f"c{i}": 2.0 for i in range(8)})
    s = Schedule(120.0, costs, SETTINGS)
    chunks = s.plan([_unit(f"c{i}", "aten.add.Tensor") for i in range(8)], size=4)
    assert [len(c.cases) for c in chunks] == [1, 2, 4, 1]  # the ramp of harness.engine.chunks
    assert [c.timeout for c in chunks] == [10.0, 12.0, 24.0, 10.0]
    assert all(c.case_timeouts == {x.case_id: 10.0 for x in c.cases} for c in chunks)


def _results(tmp_path, rows):
    from reports.tables import write_run_tables

    write_run_tables(
        tmp_path, {"run_id": "r", "backend": "neuron"}, [result_row(r, "r") for r in rows], [], {}
    )
    return tmp_path


def _row(case_id, status, seconds, stage="op", tier="unit", **extra):
    reason = "" if status == "pass" else "worker_timeout"
    return {"tier": tier, "case_id": case_id, "stage": stage, "status": status, "reason": reason,
            "seconds": seconds, **extra}  # fmt: skip


def test_the_baseline_gives_seconds_of_finished_cases_and_marks_of_dead_ones(tmp_path):
    hang = {"found": True, "op": "aten.topk.default", "kind": "hang", "route": "call_journal"}
    base = _results(
        tmp_path,
        [
            _row("a", "pass", 0.5),
            _row("m", "pass", 1.0, stage="load", tier="full"),
            _row("m", "pass", 2.5, stage="forward", tier="full"),
            _row("t", "timeout", 120.0, root_cause=hang),  # its seconds are the limit, not a cost
        ],
    )
    unit = baseline_costs(base, "unit")
    assert unit.seconds == {"a": 0.5} and unit.marks == {"aten.topk.default": "hang"}
    assert baseline_costs(base, "full").seconds == {"m": 3.5}  # summed over the case's rows
    assert baseline_costs(tmp_path / "missing", "unit").seconds == {}


def test_a_damaged_baseline_knows_nothing_and_fails_nothing(tmp_path, capsys):
    (tmp_path / "results.parquet").write_bytes(b"not parquet")
    assert baseline_costs(tmp_path, "unit").seconds == {}
    assert "every case keeps the tier's limit" in capsys.readouterr().err


@pytest.mark.parametrize(
    "mark,label,matches",
    [
        ("aten.topk.default", "aten.topk.default", True),
        ("aten.topk.default", "topk", True),  # an upstream case's OpInfo name
        ("aten.gelu.default", "nn.functional.gelu", True),
        ("aten.sort.default", "argsort", False),
        ("aten.index.Tensor", "index_select", False),
    ],
)
def test_an_op_is_matched_by_overload_packet_and_name(mark, label, matches):
    assert bool(op_keys(mark) & op_keys(label)) is matches


def test_the_cases_of_a_hanging_op_run_alone_under_the_short_limit():
    s = Schedule(120.0, BaselineCosts(seconds={"t1": 0.001, "u1": 0.001}), SETTINGS)
    cases = [_unit("t1", "aten.topk.default"), _unit("a1", "aten.add.Tensor"), _upstream("u1", "topk")]
    chunk = s.make_chunk(cases, True)
    assert s.refine(chunk) == [chunk]  # nothing marked: as planned
    assert s.mark("aten.topk.default", "hang")
    rest, *alone = s.refine(chunk)
    assert [c.case_id for c in rest.cases] == ["a1"] and not rest.diagnose
    assert [(c.cases[0].case_id, c.timeout, c.diagnose, c.spare) for c in alone] == [
        ("t1", 5.0, True, True),  # a spare worker starts beside it: it will likely die
        ("u1", 5.0, True, True),
    ]
    assert s.summary()["alone"] == {"marked_hang": 2}


def test_a_crashing_op_runs_alone_under_its_own_limit_and_a_model_that_runs_it_is_journaled():
    ops = {"m1": frozenset({"aten.index.Tensor", "aten.mm.default"}), "m2": frozenset({"aten.mm.default"})}
    s = Schedule(900.0, BaselineCosts(seconds={"m1": 20.0}), SETTINGS, ops_of=lambda c: ops[c.case_id])
    s.mark("aten.index.Tensor", "crash")
    crash = s.refine(s.make_chunk([_unit("i1", "aten.index.Tensor")], False))
    assert [(c.timeout, c.diagnose) for c in crash] == [(900.0, True)]  # the baseline does not know i1
    (m1,) = s.refine(s.make_chunk([_model("m1")], False))
    assert m1.diagnose and m1.timeout == 60.0 and m1.spare
    (m2,) = s.refine(s.make_chunk([_model("m2")], False))
    assert m2.diagnose and not m2.spare  # after a death every model case is journaled
    assert s.summary()["alone"] == {"marked_crash": 1, "runs_marked_op": 1, "after_a_death": 1}
    clean = Schedule(900.0, settings=SETTINGS, ops_of=lambda c: ops[c.case_id])
    chunk = clean.make_chunk([_model("m2")], False)
    assert clean.refine(chunk) == [chunk]  # no death, no journal


def test_marks_come_from_dead_outcomes_and_take_the_dead_cases_label():
    rc = {"found": True, "op": "aten.topk.default", "kind": "hang", "route": "call_journal"}
    out = CaseOutcome("u1", "upstream", [{"stage": "forward", "status": "timeout", "root_cause": rc}])
    assert marks_of(out) == {"aten.topk.default": "hang"}
    s = Schedule(120.0, settings=SETTINGS)
    s.observe([out], {"u1": _upstream("u1", "topk")})
    assert s.marked(_upstream("u2", "topk")) == "hang" and s.marked(_unit("x", "aten.topk.default")) == "hang"
    assert s.marked(_unit("y", "aten.add.Tensor")) is None
    not_found = CaseOutcome("v", "unit", [{"stage": "op", "status": "crash", "root_cause": {"found": False}}])
    assert marks_of(not_found) == {}


def test_suspects_run_alone_and_the_journal_switch_turns_it_all_off():
    cases = [_unit("c1", "aten.add.Tensor"), _unit("c2", "aten.mul.Tensor")]
    s = Schedule(120.0, settings=SETTINGS, suspects=["c2"])
    rest, alone = s.refine(s.make_chunk(cases, True))
    assert [c.case_id for c in rest.cases] == ["c1"] and alone.diagnose and alone.cases[0].case_id == "c2"
    assert not alone.spare  # a changed op is only a suspicion: no spare worker for it
    off = LimitSettings(journal=False)
    s = Schedule(120.0, settings=off, marks={"aten.add.Tensor": "hang"}, suspects=["c2"])
    chunk = s.make_chunk(cases, True)
    assert s.refine(chunk) == [chunk]


def test_labels():
    assert case_label(_unit("a", "aten.add.Tensor")) == "aten.add.Tensor"
    assert case_label(_upstream("u", "nn.functional.gelu")) == "nn.functional.gelu"
    assert case_label(_model("m")) == ""


def test_the_limits_are_settings(monkeypatch):
    for var in ("FACTOR", "FLOOR"):
        monkeypatch.delenv(f"HARNESS_CASE_LIMIT_{var}", raising=False)
    for var in (
        "HARNESS_MARKED_OP_LIMIT",
        "HARNESS_STALL_SECONDS",
        "HARNESS_CALL_JOURNAL",
        "HARNESS_ROOT_CAUSE",
    ):
        monkeypatch.delenv(var, raising=False)
    assert LimitSettings.current() == LimitSettings()  # the documented defaults
    monkeypatch.setenv("HARNESS_CASE_LIMIT_FACTOR", "4")
    monkeypatch.setenv("HARNESS_MARKED_OP_LIMIT", "2.5")
    monkeypatch.setenv("HARNESS_CALL_JOURNAL", "off")
    assert LimitSettings.current() == LimitSettings(factor=4.0, marked=2.5, journal=False)
    monkeypatch.setenv("HARNESS_ROOT_CAUSE", "off")
    assert LimitSettings.current().localize == 0.0  # nothing is localized inside a case
    monkeypatch.setenv("HARNESS_STALL_SECONDS", "-1")
    with pytest.raises(ValueError, match="HARNESS_STALL_SECONDS"):
        LimitSettings.current()
