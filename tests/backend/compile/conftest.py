"""Fixtures of the compile tests: a private cache directory per test, never the user's cache."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from tests.backend.compile.neff_helpers import RuleTable, mlp_with_cumsum


@pytest.fixture(autouse=True)
def neff_cache_dir(tmp_path, monkeypatch):
    cache = tmp_path / "neff-cache"
    monkeypatch.setenv("NEURON_CACHE_DIR", str(cache))
    monkeypatch.delenv("NEURON_SHARED_CACHE_DIR", raising=False)
    monkeypatch.delenv("NEURON_COMPILE_FALLBACK", raising=False)
    monkeypatch.delenv("NEURON_COMPILE_INJECT_FAILURE", raising=False)
    monkeypatch.setenv("NEURON_COMPILE_COST_SCALE", "1.0")
    return cache


@pytest.fixture
def rule_table():
    return RuleTable()


@pytest.fixture
def host_graph():
    """An aten graph of a small MLP with one op the table lacks (cumsum), and its inputs."""
    torch.manual_seed(0)
    args = (torch.randn(4, 8), torch.randn(3, 8), torch.randn(3))
    return make_fx(mlp_with_cumsum, tracing_mode="fake")(*args), args


@pytest.fixture
def exact_precision():
    """The device's exact mode for one test (the mode is read from the env once, at import)."""
    import importlib

    precision = importlib.import_module("backend.precision")
    previous = precision.set_precision("exact")
    yield
    precision.set_precision(previous)


@pytest.fixture
def table_without_gelu():
    """The device's table with aten.gelu (and its backward) removed, under a new version."""
    from backend import lowering

    previous = lowering.current_table()
    doc = previous.to_dict()
    for op in [k for k in doc["ops"] if k.startswith("aten.gelu")]:
        del doc["ops"][op]
    doc["version"] = previous.version + "+no-gelu"
    lowering.set_table(lowering.parse_table(doc, "test"))
    yield
    lowering.set_table(previous)
