"""`harness cache stats [--json] | clear | warm MODEL`."""

from __future__ import annotations

import json

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from backend.cache import get_cache
from backend.neff import CompilerFlags, TensorSpec, compile_partition
from backend.neff.compiler import plan
from harness.cli import main


def _fill_one_artifact():
    gm = make_fx(lambda x: x.exp() + 1)(torch.ones(2, 2))
    specs = [TensorSpec((2, 2), (2, 1), "float32")]
    planned = plan(gm, specs, "t1", CompilerFlags())
    get_cache().get_or_compile(
        planned[0], lambda: compile_partition(gm, specs, [], "t1", CompilerFlags(), planned=planned)
    )
    return planned[0]


def _json_out(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_stats_json_counts_levels_and_clear_empties_the_disk(capsys, neff_cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_SHARED_CACHE_DIR", str(tmp_path / "shared"))
    empty = _json_out(capsys, ["cache", "stats", "--json"])
    assert empty["cache_dir"] == str(neff_cache_dir) and empty["disk"]["entries"] == 0
    _fill_one_artifact()
    stats = _json_out(capsys, ["cache", "stats", "--json"])
    assert stats["disk"]["entries"] == 1 and stats["disk"]["bytes"] > 0
    assert stats["shared"]["entries"] == 1
    assert stats["cumulative"]["compiles"] == 1 and stats["cumulative"]["compile_seconds"] > 0
    assert main(["cache", "stats"]) == 0
    assert "1 artifacts" in capsys.readouterr().out
    removed = _json_out(capsys, ["cache", "clear", "--json"])
    assert removed == {"removed": {"disk": 1}}
    after = _json_out(capsys, ["cache", "stats", "--json"])
    assert after["disk"]["entries"] == 0 and after["shared"]["entries"] == 1  # shared kept
    assert _json_out(capsys, ["cache", "clear", "--shared", "--json"])["removed"]["shared"] == 1


def test_warm_unknown_model_is_a_clear_error(capsys):
    assert main(["cache", "warm", "no-such-model-type"]) == 2
    assert "no-such-model-type" in capsys.readouterr().err


@pytest.mark.slow
def test_warm_fills_the_cache_then_hits_it(capsys):
    torch._dynamo.reset()
    first = _json_out(capsys, ["cache", "warm", "bert", "--json"])
    assert first["status"] == "pass" and first["compiles"] >= 1
    torch._dynamo.reset()
    get_cache().memory.clear()  # as a new process would: only the disk remembers
    second = _json_out(capsys, ["cache", "warm", "bert", "--json"])
    assert second["compiles"] == 0 and second["hits"]["disk"] == first["compiles"]
