"""A found call reduced to a registry case and a standalone test: the values that matter kept, the
replay failing only where the fault is, compiled cases through the compiler, verification in a
process of torch and the device alone (bounded, a crash reported), and only verified repros
becoming registry entries."""

from __future__ import annotations

import contextlib
import time

import pytest
import torch
import yaml

from contracts.rootcause import Repro, RootCause
from harness.rootcause import repro
from harness.rootcause.shadow import ShadowMode, Stop


@pytest.fixture(scope="module")
def adapter():
    from contracts.backends import get_backend

    return get_backend("neuron")


@pytest.fixture
def planted():
    from backend import faults

    yield faults.planted
    faults.clear()


def _find(adapter, fn, *inputs):
    """Run fn(*inputs) on the device under the shadow; the finding."""
    mode = ShadowMode(adapter.device_type, None, False, time.monotonic() + 60)
    with contextlib.suppress(Stop), mode:
        fn(*inputs)
    return mode.found


def test_integer_inputs_are_kept_concrete_and_the_replay_fails_only_on_the_faulted_device(adapter, planted):
    """The last embedding row is wrong: the case keeps the very indices the model gave (the last row
    among them); the weight is rebuilt from the case's seed."""
    weight = torch.randn(10, 4).to("neuron")
    ids = torch.tensor([[0, 9, 3], [9, 1, 2]]).to("neuron")
    with planted(
        op="aten.embedding.default", kind="perturb", rel=0.1, input="weight", index={"dim": 0, "at": "last"}
    ):
        f = _find(adapter, torch.nn.functional.embedding, ids, weight)
        assert f is not None and f.op == "aten.embedding.default"
        case = repro.case_of(f)
        assert case["constraints"]["a.1"] == {
            "kind": "values",
            "values": [0, 9, 3, 9, 1, 2],
            "source": "repro",
        }
        assert "a.0" not in case["constraints"]  # floats: rebuilt from the seed
        assert case["outputs"] == [{"T": [2, 3, 4], "dt": "f32"}]
        fails, how = repro._replays_failing(case, adapter)
        assert fails and how.startswith("mismatch")
    fails, how = repro._replays_failing(case, adapter)
    assert not fails and how == "pass"


def test_floats_with_non_finite_values_are_kept_concrete(adapter, planted):
    """A masked score row (-inf) is a value that matters: rebuilt at random it would not be masked."""
    scores = torch.randn(2, 5)
    scores[:, -2:] = float("-inf")
    with planted(op="aten._softmax.default", kind="perturb", rel=0.01):
        f = _find(adapter, lambda t: torch.softmax(t, -1), scores.to("neuron"))
    case = repro.case_of(f)
    values = case["constraints"]["a.0"]["values"]
    assert values[3:5] == ["-inf", "-inf"] and len(values) == 10
    assert case["op"] == "aten._softmax.default" and case["signature"].startswith('{"a":[{"T":[2,5]')


def test_a_compiled_case_replays_through_the_backends_compiler(adapter, planted):
    from registry.encoding import signature
    from registry.replay import CaseSpec, replay

    a_enc = [{"T": [4, 8], "dt": "f32"}]
    eager = CaseSpec("aten.gelu.default", signature(a_enc, {}))
    compiled = CaseSpec("aten.gelu.default", signature(a_enc, {}, "compiled"))
    with planted(op="aten.gelu.default", kind="perturb", rel=0.01, scope="compiled"):
        assert replay(eager, adapter, "exact").status.value == "pass"  # eager is right
        assert replay(compiled, adapter, "exact").status.value == "fail"
    assert replay(compiled, adapter, "exact").status.value == "pass"


@pytest.mark.slow
def test_the_standalone_repro_fails_on_the_faulted_device_and_passes_clean(adapter, tmp_path, monkeypatch):
    from backend import faults

    path = tmp_path / "faults.yaml"
    fault = {"name": "gelu", "op": "aten.gelu.default", "kind": "perturb", "rel": 0.01}
    path.write_text(yaml.safe_dump({"version": 1, "faults": [fault]}))
    monkeypatch.setenv("NEURON_FAULTS", str(path))
    faults.load(path)
    try:
        f = _find(adapter, torch.nn.functional.gelu, torch.randn(3, 7).to("neuron"))
        case = repro.case_of(f)
        monkeypatch.setattr(repro, "_verified", {})
        verified, why = repro.verify(case, "neuron", time.monotonic() + 300, "mismatch")
        assert (
            verified is True and why.startswith("fails on neuron (AssertionError") and "passes on cpu" in why
        )
        name, text = repro.standalone(case, "neuron")
        assert name == f"test_aten_gelu_default_{repro._entry(case).case_id.rpartition('-')[2]}.py"
        assert "import harness" not in text and "import registry" not in text  # torch and the device only
    finally:
        faults.clear()
    monkeypatch.delenv("NEURON_FAULTS")
    monkeypatch.setattr(repro, "_verified", {})
    verified, why = repro.verify(case, "neuron", time.monotonic() + 300, "mismatch")
    assert verified is False and why.startswith("the repro passes on neuron")


def test_a_row_without_time_left_is_not_verified_and_says_why():
    case = {
        "op": "aten.gelu.default",
        "signature": '{"a":[{"T":[2],"dt":"f32"}],"k":{}}',
        "constraints": {},
        "outputs": [],
    }
    verified, why = repro.verify(case, "neuron", time.monotonic() - 1, "mismatch")
    assert verified is None and "HARNESS_ROOT_CAUSE_SECONDS" in why


def test_only_verified_repros_become_registry_entries_with_their_provenance():
    case = {
        "op": "aten.gelu.default",
        "signature": '{"a":[{"T":[2,3],"dt":"f32"}],"k":{}}',
        "constraints": {},
        "outputs": [{"T": [2, 3], "dt": "f32"}],
    }

    def row(case_id, verified, found=True):
        rc = RootCause(
            found=found,
            op="aten.gelu.default" if found else "",
            phase="forward",
            kind="mismatch",
            route="eager_shadow",
            repro=Repro("repros/x.py", "k", verified, "why", case=case) if found else None,
        )
        return {
            "run_id": "r1",
            "tier": "representative",
            "case_id": case_id,
            "stage": "numerics",
            "model_id": f"catalog/{case_id}",
            "weight": 5.0,
            "root_cause": rc,
        }

    rows = [row("a", True), row("b", False), row("c", None), row("d", None, found=False)]
    entries, left = repro.entries("unused", rows, backend="neuron")
    assert len(entries) == 1
    (e,) = entries
    assert (e.op, e.signature) == (case["op"], case["signature"])
    assert [(p.model, p.tier, p.phase, p.mode) for p in e.provenance] == [
        ("catalog/a", "representative", "forward", "repro")
    ]
    assert e.repro[0]["run"] == "r1" and e.repro[0]["case"] == "a" and e.repro[0]["backend"] == "neuron"
    assert [item["case"] for item in left] == ["b", "c"]  # not verified (found-nothing rows are not repros)


def test_the_verifier_reports_a_failure_a_crash_and_a_run_out_of_time(tmp_path):
    from harness.rootcause.verifier import Verifier

    bodies = {
        "ok": "assert True",
        "bad": "raise ValueError('wrong on ' + os.environ['REPRO_DEVICE'])",
        "crash": "os.kill(os.getpid(), signal.SIGSEGV)",
        "hang": "time.sleep(600)",
    }
    for name, body in bodies.items():
        text = f"import os, signal, time\nCASES = {{'a': 1}}\ndef test_case(c):\n    {body}\n"
        (tmp_path / f"{name}.py").write_text(text)
    v = Verifier()
    try:
        assert v.run(str(tmp_path / "ok.py"), "cpu", 120) == {"status": "pass", "raised": "", "cases": 1}
        bad = v.run(str(tmp_path / "bad.py"), "neuron", 120)
        assert bad["status"] == "fail" and bad["raised"] == "ValueError: wrong on neuron"
        assert v.run(str(tmp_path / "crash.py"), "cpu", 120) == {
            "status": "died",
            "raised": "the process died (signal 11)",
        }
        assert v.run(str(tmp_path / "hang.py"), "cpu", 3) is None and v.proc is None  # killed
        assert v.run(str(tmp_path / "ok.py"), "cpu", 120)["status"] == "pass"  # a new one takes over
    finally:
        v.stop()
