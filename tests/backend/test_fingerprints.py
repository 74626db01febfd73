"""Per-op fingerprints (backend.fingerprints): exactly the ops whose lowering or kernel changed differ."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

import backend
from backend import faults, lowering
from backend.adapter import NeuronBackend
from backend.fingerprints import op_fingerprints


@pytest.fixture(autouse=True)
def clean_state():
    faults.clear()
    previous = backend.set_precision("bf16")
    yield
    faults.clear()
    backend.set_precision(previous)
    lowering.set_table(None)


def _changed(a, b):
    assert a["shared"] == b["shared"]
    return {k for k in set(a["ops"]) | set(b["ops"]) if a["ops"].get(k) != b["ops"].get(k)}


def test_fingerprints_are_stable_and_the_adapter_exposes_them():
    a, b = op_fingerprints(), NeuronBackend().op_fingerprints()
    assert a == b and a["version"] == 1 and len(a["shared"]) == 16
    assert "aten.mm" in a["ops"] and "aten.empty.memory_format" in a["ops"]


def test_a_planted_fault_changes_only_its_ops():
    before = op_fingerprints()
    with faults.planted(name="g", op="aten.gelu.default", kind="perturb", rel=0.01):
        during = op_fingerprints()
    assert _changed(before, during) == {
        "aten.gelu.default",
        "aten.gelu.out",
    }  # a fault arms the out= variant too
    with faults.planted(name="m", op="aten.mm", kind="nan"):
        packet = op_fingerprints()
    assert "aten.mm" in _changed(before, packet) and "aten.mm.default" in _changed(before, packet)
    assert all(k.startswith("aten.mm") for k in _changed(before, packet))
    assert op_fingerprints() == before


def test_a_lowering_change_and_the_precision_mode_change_exactly_the_ops_concerned(tmp_path):
    before = op_fingerprints()
    data = yaml.safe_load(resources.files("backend").joinpath("lowering_table.yaml").read_text())
    data["ops"].pop("aten.gelu", None)
    data["ops"]["aten.mm"] = ["float32"]
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(data))
    lowering.set_table(path)
    assert _changed(before, op_fingerprints()) == {"aten.gelu", "aten.mm"}
    lowering.set_table(None)
    backend.set_precision("exact")
    exact = _changed(before, op_fingerprints())
    assert "aten.mm" in exact and "aten.addmm" in exact and "aten.gelu" not in exact
