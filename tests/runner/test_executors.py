"""Executor selection: local by default, ray only when asked for, with a clear error without it."""

from __future__ import annotations

import sys

import pytest

from harness.executors import make_executor
from harness.workers import WorkerLimits


def test_ray_without_the_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(RuntimeError, match=r"neuron-coverage-harness\[ray\]"):
        make_executor("ray", "runner.trivial_tier:TIER", "cpu", 1, WorkerLimits())


def test_unknown_executor_is_refused():
    with pytest.raises(ValueError, match="local, ray"):
        make_executor("dask", "runner.trivial_tier:TIER", "cpu", 1, WorkerLimits())
    assert make_executor("local", "runner.trivial_tier:TIER", "cpu", 3, WorkerLimits()).workers == 3
