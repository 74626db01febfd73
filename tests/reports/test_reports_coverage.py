"""Coverage with denominators: per tier and stage, three levels kept apart, weighted, by trait, ops ranked."""

from __future__ import annotations

import pytest

from reports.coverage import fmt_rate, summarize, summarize_run
from reports.tables import read_results
from tests.reports.reports_synth import base_rows


@pytest.fixture
def cov(make_run):
    return summarize_run(make_run())


def _stage(cov, tier, stage):
    return next(s for s in cov.stages if (s.tier, s.stage) == (tier, stage))


def _level(cov, tier, level):
    return next(lv for lv in cov.levels if (lv.tier, lv.level) == (tier, level))


def test_stage_counts_cover_every_case(cov):
    rows = base_rows()
    for s in cov.stages:
        expected = [r for r in rows if (r["tier"], r["stage"]) == (s.tier, s.stage)]
        assert s.cases == len(expected)
        assert sum(s.by_status.values()) == s.cases  # the denominator is the sum of all outcomes
        for status, n in s.by_status.items():
            assert n == sum(r["status"] == status for r in expected)


def test_skipped_and_not_attempted_by_reason(cov):
    back = _stage(cov, "representative", "backward")
    assert back.skipped_reasons == {"no loss": 1}
    assert back.not_attempted_reasons == {"an earlier stage failed": 2}
    assert back.passed == 1
    load = _stage(cov, "full", "load")
    assert load.by_status["timeout"] == 1 and load.errored == 1
    assert (load.models, load.weight) == (6, 1000.0)
    unit = _stage(cov, "unit", "op")
    assert unit.skipped_reasons == {"dtype float64 not supported": 1} and unit.by_status["fail"] == 1


def test_levels_count_models_and_downloads(cov):
    # full: a(3 models, 600) passes all; d(2, 400) fails on_device; g(1, 0) times out in load
    loads, computes, device = (_level(cov, "full", n) for n in ("loads", "computes", "on_device"))
    assert (loads.models_reached, loads.models, loads.cases_reached, loads.cases) == (5, 6, 2, 3)
    assert (computes.models_reached, computes.weight_reached) == (5, 1000.0)
    assert (device.models_reached, device.weight_reached, device.weight) == (3, 600.0, 1000.0)
    assert device.not_reached == {"fail": 2, "timeout": 1}
    assert device.blockers[0] == {
        "stage": "on_device",
        "status": "fail",
        "reason": "fallback: aten::foo",
        "blame": "none",
        "cases": 1,
        "models": 2,
    }
    assert device.fmt_models() == "3/6 (50.0%)" and device.fmt_weight() == "600/1,000 (60.0%)"


def test_levels_are_kept_apart(cov):
    # gpt2: backward skipped (no loss) still computes; it falls back, so it does not run fully on device
    rep = {n: _level(cov, "representative", n) for n in ("loads", "computes", "on_device")}
    assert rep["loads"].models_reached == 3  # bert, gpt2, vit
    assert rep["computes"].models_reached == 2  # bert, gpt2
    assert rep["on_device"].models_reached == 1  # bert
    assert not any(lv.tier == "unit" for lv in cov.levels)  # op cases have no model levels


def test_missing_stage_row_is_not_attempted_not_pass(make_run):
    rows = [r for r in base_rows() if not (r["case_id"] == "rep/bert" and r["stage"] == "on_device")]
    cov = summarize(read_results(make_run(rows=rows)))
    device = _level(cov, "representative", "on_device")
    assert device.models_reached == 0
    assert {
        "stage": "on_device",
        "status": "not_attempted",
        "reason": "stage not recorded",
        "blame": "none",
        "cases": 1,
        "models": 1,
    } in device.blockers


def test_trait_coverage(cov):
    vision = next(t for t in cov.traits if (t.tier, t.trait, t.value) == ("full", "modality", "vision"))
    assert (vision.models, vision.weight) == (3, 400.0)
    assert vision.reached == {"loads": 2, "computes": 2, "on_device": 0}
    sdpa = next(t for t in cov.traits if (t.tier, t.trait, t.value) == ("full", "attention", "sdpa"))
    assert sdpa.models == 3  # list-valued traits count the model under each value


def test_fallback_ops_ranked_by_models_blocked(cov):
    ops = [(o["tier"], o["op"], o["models_blocked"]) for o in cov.top_fallback_ops]
    assert ops == [("full", "aten::foo", 2), ("representative", "aten::_cdist_forward", 1)]
    assert cov.top_fallback_ops[0]["download_share_blocked"] == pytest.approx(0.4)


def test_rates_always_carry_denominators():
    assert fmt_rate(3, 6) == "3/6 (50.0%)"
    assert fmt_rate(0, 0) == "0/0 (n/a)"
    assert fmt_rate(600.0, 1000.0, weighted=True) == "600/1,000 (60.0%)"


def _full_tier_rows(fallbacks: list[int | None]) -> list[dict]:
    """Full-tier cases with load/forward/backward only: the fallback count rides on the last row."""
    rows = []
    for i, n in enumerate(fallbacks):
        for stage in ("load", "forward", "backward"):
            rows.append(
                {
                    "tier": "full",
                    "case_id": f"c{i}",
                    "model_ids": [f"m{i}"],
                    "stage": stage,
                    "status": "pass",
                    "weight": 10.0,
                    "fallback_count": n if stage == "backward" else None,
                    "fallback_ops": ["aten.index.Tensor"] if stage == "backward" and n else [],
                }
            )
    return rows


def test_on_device_derived_from_fallbacks_when_tier_has_no_such_stage(make_run):
    cov = summarize_run(make_run(rows=_full_tier_rows([0, 0, 4, None]), events=[]))
    device = _level(cov, "full", "on_device")
    assert (device.models_reached, device.models) == (2, 4)
    assert device.not_reached == {"fail": 1, "not_attempted": 1}
    reasons = {(b["status"], b["reason"]) for b in device.blockers}
    assert reasons == {
        ("fail", "fallback: aten.index.Tensor"),
        ("not_attempted", "stage not recorded and no fallback count reported"),
    }
    assert _level(cov, "full", "computes").models_reached == 4


def test_errors_group_by_exception_type(make_run):
    def edit(rows):
        for i, r in enumerate(rows):
            if r["tier"] == "full" and r["stage"] == "forward":
                r.update(
                    status="error", error_class="RuntimeError", reason=f"RuntimeError: shape {i} mismatch"
                )

    cov = summarize_run(make_run(edit=edit))
    blockers = _level(cov, "full", "computes").blockers
    assert blockers[0] == {
        "stage": "forward",
        "status": "error",
        "reason": "RuntimeError",
        "blame": "none",
        "cases": 2,
        "models": 5,
    }
