"""Shape scaling has one count: what `registry import` calls replayable (and scaled by how much) is
what the unit tier replays, with the same `--shape-budget`; autocast lines the CPU kernel rejects
as recorded are unreplayable at import with the reason, never an error of the backend."""

from __future__ import annotations

import json

import pytest

from contracts.backends import get_backend
from harness.cli import main
from registry.oplog import import_oplog
from registry.replay import CaseSpec, replay
from registry.store import Registry

LOG = """\
Operator: aten._softmax.default
cnt: 4, ((T([4, 12, 1024, 1024], f16), -1, False), {})
Operator: aten.add.Tensor
cnt: 1, ((T([8, 16], f32), T([8, 16], f32)), {})
Operator: aten.as_strided.default
cnt: 1, ((T([20, 1024, 1024], f32), [20, 1024, 1024], [1048576, 1024, 1]), {})
Operator: aten.native_layer_norm_backward.default
cnt: 2, ((T([4, 8, 16], f16), T([4, 8, 16], f16), [16], T([4, 8, 1], f32), T([4, 8, 1], f32), T([16], f16), T([16], f16), [True, True, True]), {})
"""  # noqa: E501 - an op-log line is one line of data


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(LOG)
    return path


def test_import_decides_scaling_and_autocast_with_reasons(log):
    result = import_oplog(log)
    assert (result.lines, result.cases) == (4, 2)
    assert sum(result.scaled.values()) == 1  # the softmax
    reasons = {u.op: u.reason for u in result.unreplayable}
    assert "cannot be scaled" in reasons["aten.as_strided.default"]
    assert reasons["aten.native_layer_norm_backward.default"].startswith("recorded under autocast")
    small = import_oplog(log, shape_budget=2**26)  # everything fits: nothing scaled, the strided call runs
    assert sum(small.scaled.values()) == 0 and small.cases == 3


def test_a_case_the_import_keeps_replays_as_counted(log):
    result = import_oplog(log)
    cpu = get_backend("cpu")
    runs = [replay(CaseSpec.from_entry(e), cpu) for e in result.registry]
    assert all(r.status.value == "pass" for r in runs), [r.reason for r in runs]
    assert sum(1 for r in runs if r.metrics.get("scaled_by")) == sum(result.scaled.values())


def test_an_autocast_call_is_never_an_error_of_the_backend():
    """A case already in a registry (recorded before the import check): the backend raising what the
    CPU kernel raises for the call as recorded is unreplayable, not an error."""
    log = import_oplog.__globals__["parse_call"]  # the encoder of the log format
    args, kwargs = log(
        "aten.native_layer_norm_backward.default",
        "((T([4, 8, 16], f16), T([4, 8, 16], f16), [16], T([4, 8, 1], f32), T([4, 8, 1], f32), "
        "T([16], f16), T([16], f16), [True, True, True]), {})",
    )
    from registry.encoding import signature

    spec = CaseSpec("aten.native_layer_norm_backward.default", signature(args, kwargs), {})
    result = replay(spec, get_backend("neuron"))
    assert result.status.value == "skipped" and "rejects the call as recorded" in result.reason


@pytest.mark.slow
def test_import_and_run_agree_on_the_count(log, tmp_path, capsys):
    out = tmp_path / "r.parquet"
    for budget in (2**18, 2**20):
        assert (
            main(["registry", "import", str(log), "--out", str(out), "--shape-budget", str(budget), "--json"])
            == 0
        )
        imported = json.loads(capsys.readouterr().out)
        assert imported["shape_budget"] == budget and imported["cases"] == len(Registry.load(out))
        run_dir = tmp_path / f"run-{budget}"
        assert (
            main(
                [
                    "run",
                    "--tier",
                    "unit",
                    "--registry",
                    str(out),
                    "--backend",
                    "neuron",
                    "--workers",
                    "1",
                    "--out",
                    str(run_dir),
                    "--shape-budget",
                    str(budget),
                    "--no-progress",
                    "--json",
                ]
            )
            == 0
        )
        ran = json.loads(capsys.readouterr().out)
        assert ran["scaling"]["shape_budget"] == budget
        assert ran["scaling"]["scaled"] == imported["scaled"]
        assert ran["scaling"]["scaled_by_factor"] == imported["scaled_by_factor"]
        assert ran["scaling"]["unreplayable"] == 0 and ran["counts"] == {"pass": imported["cases"]}
