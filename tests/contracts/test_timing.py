"""contracts.timing: phases are exclusive, nest, work as decorators and are taken once."""

from __future__ import annotations

import pytest

from contracts import timing
from contracts.timing import phase


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves only when the test says so (no timing is measured, only accounted)."""
    now = [100.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    timing.take()

    def advance(seconds: float) -> None:
        now[0] += seconds

    return advance


def test_a_nested_phase_pauses_the_enclosing_one(clock):
    with phase("reference"):
        clock(1.0)
        with phase("shrink"):
            clock(2.0)
        clock(0.5)
    clock(10.0)  # outside any phase: counted nowhere
    assert timing.take() == {"reference": 1.5, "shrink": 2.0}
    assert timing.take() == {}  # taken once


def test_take_inside_a_running_phase_counts_up_to_now_and_goes_on(clock):
    with phase("reference"):
        clock(1.0)
        with phase("blame"):
            clock(3.0)
            assert timing.take() == {"reference": 1.0, "blame": 3.0}
            clock(1.0)
        clock(2.0)
    assert timing.take() == {"blame": 1.0, "reference": 2.0}


def test_phase_as_a_decorator_counts_each_call_and_survives_an_exception(clock):
    @phase("shrink")
    def shrink(seconds: float, fail: bool = False) -> None:
        clock(seconds)
        if fail:
            raise ValueError("bad config")

    shrink(1.0)
    with pytest.raises(ValueError):
        shrink(2.0, fail=True)
    assert timing.take() == {"shrink": 3.0}
