"""Fixtures for runner tests: a case file for the trivial tier and run options that stay fast."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TRIVIAL = "tests.harness.engine.trivial_tier:TIER"
CHUNKED = "tests.harness.engine.trivial_tier:CHUNKED"


@pytest.fixture
def case_file(tmp_path):
    """write([(id, action), ...]) -> path of a JSON case list for the trivial tier."""

    def write(cases, name="cases.json"):
        path = tmp_path / name
        path.write_text(json.dumps([{"id": i, "action": a} for i, a in cases]))
        return str(path)

    return write


@pytest.fixture
def subprocess_env():
    """Environment for `python -m harness` subprocesses that can import the test tier."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env.pop("RAY_ADDRESS", None)
    return env


def harness_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]
