"""Planted faults (backend.faults): each kind has its effect, eager and compiled; bad files fail clearly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import backend
from backend import faults
from backend.errors import FaultFileError, NeuronFaultError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_faults_left(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path / "neff"))
    faults.clear()
    faults.reset_hits()
    yield
    faults.clear()


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- effects, eager


def test_perturb_changes_values_by_the_stated_relative_error():
    x = _x(4, 16)
    clean = torch.softmax(x.to("neuron"), -1).cpu()
    with faults.planted(name="sm", op="aten._softmax.default", kind="perturb", rel=0.01):
        bad = torch.softmax(x.to("neuron"), -1).cpu()
    rel = ((bad - clean) / clean).abs()
    assert torch.allclose(rel, torch.full_like(rel, 0.01), atol=1e-5)
    assert ((bad - clean) > 0).any() and ((bad - clean) < 0).any()  # signs pattern: both directions
    assert faults.hits() == {"sm": 1}
    assert torch.equal(torch.softmax(x.to("neuron"), -1).cpu(), clean)  # removed after the block


def test_perturb_scale_pattern_and_output_selection():
    x = _x(3, 8).to("neuron").requires_grad_()
    w = torch.ones(8, device="neuron", requires_grad=True)
    b = torch.zeros(8, device="neuron", requires_grad=True)

    def grads():
        for t in (x, w, b):
            t.grad = None
        torch.nn.functional.layer_norm(x, (8,), w, b).pow(3).sum().backward()
        return x.grad.cpu(), w.grad.cpu(), b.grad.cpu()

    clean = grads()
    with faults.planted(
        name="lnw",
        op="aten.native_layer_norm_backward.default",
        kind="perturb",
        rel=0.02,
        pattern="scale",
        output=1,
    ):
        bad = grads()
    assert torch.equal(bad[0], clean[0]) and torch.equal(bad[2], clean[2])  # only the weight gradient
    assert torch.allclose(bad[1], clean[1] * 1.02, rtol=1e-6)


def test_input_slice_fault_only_touches_the_last_row():
    weight = _x(10, 4).to("neuron")
    before = weight.cpu().clone()
    with faults.planted(
        name="last",
        op="aten.embedding.default",
        kind="perturb",
        rel=0.1,
        input="weight",
        index={"dim": 0, "at": "last"},
    ):
        out = torch.nn.functional.embedding(torch.tensor([0, 9, 3, 9], device="neuron"), weight).cpu()
        assert faults.hits() == {"last": 1}
    ref = weight.cpu()[[0, 9, 3, 9]]
    assert torch.equal(out[[0, 2]], ref[[0, 2]])
    assert torch.allclose(
        ((out[[1, 3]] - ref[[1, 3]]) / ref[[1, 3]]).abs(), torch.full((2, 4), 0.1), atol=1e-5
    )
    assert torch.equal(weight.cpu(), before)  # the real weight is untouched


def test_output_slice_and_shape_and_dtype_predicates():
    with faults.planted(
        name="mm",
        op="aten.mm",
        kind="nan",
        index={"dim": -1, "at": "last"},
        when=[{"arg": "self", "dim": 1, "min": 64}],
        dtypes=["float32"],
    ):
        small = (_x(4, 32).to("neuron") @ _x(32, 5).to("neuron")).cpu()
        assert not small.isnan().any()  # K = 32: the shape predicate does not hold
        half = (_x(4, 64).to("neuron").half() @ _x(64, 5).to("neuron").half()).cpu()
        assert not half.isnan().any()  # float16: the dtype predicate does not hold
        big = (_x(4, 64).to("neuron") @ _x(64, 5).to("neuron")).cpu()
    assert big[:, -1].isnan().all() and not big[:, :-1].isnan().any()
    assert faults.hits() == {"mm": 1}


def test_substitute_runs_the_op_with_other_arguments():
    x = _x(5, 7)
    with faults.planted(
        name="tanh", op="aten.gelu.default", kind="substitute", kwargs={"approximate": "tanh"}
    ):
        out = torch.nn.functional.gelu(x.to("neuron")).cpu()
    assert torch.equal(out, torch.nn.functional.gelu(x, approximate="tanh"))
    assert not torch.equal(out, torch.nn.functional.gelu(x))


def test_raise_names_the_op_and_the_harness_reads_it():
    from contracts.errors import classify

    with faults.planted(name="boom", op="aten.mm.default", kind="raise"):
        with pytest.raises(NeuronFaultError, match=r"aten\.mm\.default") as info:
            _x(2, 2).to("neuron") @ _x(2, 2).to("neuron")
    assert info.value.op == "aten.mm.default" and info.value.fault == "boom"
    assert classify(info.value).failing_op == "aten.mm.default"


def test_fallback_records_a_lost_lowering():
    x = _x(3, 3).to("neuron")
    with backend.collect_fallbacks() as clean:
        torch.nn.functional.gelu(x)
    assert clean == []
    with (
        faults.planted(name="lost", op="aten.gelu.default", kind="fallback"),
        backend.collect_fallbacks() as events,
    ):
        out = torch.nn.functional.gelu(x).cpu()
    assert [(e.op, e.reason) for e in events] == [("aten.gelu.default", "no-lowering")]
    assert torch.equal(out, torch.nn.functional.gelu(x.cpu()))  # still computed, on the host


def test_finite_hang_returns_after_its_seconds():
    import time

    with faults.planted(name="stall", op="aten.abs.default", kind="hang", seconds=0.3):
        t0 = time.monotonic()
        torch.ones(2, device="neuron").abs()
        assert time.monotonic() - t0 >= 0.3


def _python(code: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _fault_file(tmp_path, *entries) -> str:
    import yaml

    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "faults": list(entries)}))
    return str(path)


def test_hang_never_returns(tmp_path):
    path = _fault_file(tmp_path, {"name": "stuck", "op": "aten.abs.default", "kind": "hang"})
    with pytest.raises(subprocess.TimeoutExpired):
        _python(
            "import torch, backend; torch.ones(2, device='neuron').abs(); print('returned')",
            {"NEURON_FAULTS": path},
            timeout=8,
        )


def test_crash_kills_the_process_and_env_loading_logs_what_fired(tmp_path):
    path = _fault_file(tmp_path, {"name": "segv", "op": "aten.sort", "kind": "crash"})
    log = tmp_path / "fired.jsonl"
    proc = _python(
        "import torch, backend; torch.ones(3, device='neuron').sort(); print('survived')",
        {"NEURON_FAULTS": path, "NEURON_FAULT_LOG": str(log)},
        timeout=60,
    )
    assert proc.returncode == -signal.SIGSEGV, proc.stderr[-500:]
    assert "survived" not in proc.stdout
    assert [json.loads(line)["fault"] for line in log.read_text().splitlines()] == ["segv"]


# --------------------------------------------------------------------------------- compiled


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return torch.softmax(self.norm(torch.nn.functional.gelu(self.lin(x))), -1)


def _net_and_input():
    return _Net().to("neuron"), _x(4, 8).to("neuron")


@pytest.mark.parametrize(
    "scope,eager_changes,compiled_changes",
    [("both", True, True), ("compiled", False, True), ("eager", True, False)],
)
def test_scope_decides_eager_and_compiled(scope, eager_changes, compiled_changes):
    torch._dynamo.reset()
    model, x = _net_and_input()
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        ref = model(x).cpu()
        assert torch.equal(compiled(x).cpu(), ref)
        with faults.planted(name="sm", op="aten._softmax.default", kind="perturb", rel=0.01, scope=scope):
            eager, comp = model(x).cpu(), compiled(x).cpu()  # planting resets Dynamo: a recompile
    assert (not torch.equal(eager, ref)) == eager_changes
    assert (not torch.equal(comp, ref)) == compiled_changes
    if compiled_changes:
        assert torch.allclose(((comp - ref) / ref).abs(), torch.full_like(ref, 0.01), atol=1e-5)
    torch._dynamo.reset()


def test_compiled_backward_fault_and_compiled_raise():
    torch._dynamo.reset()
    model, x = _net_and_input()
    compiled = torch.compile(model, backend="neuron")

    def weight_grad(fn):
        model.zero_grad()
        fn(x).pow(2).sum().backward()
        return model.norm.weight.grad.cpu().clone()

    clean = weight_grad(model)
    with faults.planted(
        name="lnw",
        op="aten.native_layer_norm_backward.default",
        kind="perturb",
        rel=0.02,
        output=1,
        pattern="scale",
        scope="compiled",
    ):
        assert torch.equal(weight_grad(model), clean)
        assert torch.allclose(weight_grad(compiled), clean * 1.02, rtol=1e-5)
    with faults.planted(name="addmm", op="aten.addmm.default", kind="raise", scope="compiled"):
        model(x)  # eager is unaffected
        with pytest.raises(NeuronFaultError):
            compiled(x)
    torch._dynamo.reset()


def test_compiled_fallback_fault_is_a_recorded_fallback():
    torch._dynamo.reset()
    model, x = _net_and_input()
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad(), faults.planted(name="lost", op="aten.native_layer_norm.default", kind="fallback"):
        with backend.collect_fallbacks() as events:
            compiled(x)
    assert {(e.op, e.reason) for e in events} == {("aten.native_layer_norm.default", "no-lowering")}
    torch._dynamo.reset()


# ------------------------------------------------------------------------ files and checks


@pytest.mark.parametrize(
    "entry,needle",
    [
        ({"name": "a", "op": "aten.mm.default", "kind": "explode"}, "kind must be one of"),
        ({"name": "b", "op": "aten.no_such_op", "kind": "nan"}, "does not exist"),
        ({"name": "c", "op": "aten.mm.default", "kind": "perturb"}, "needs 'rel'"),
        (
            {"name": "d", "op": "aten.mm.default", "kind": "nan", "when": [{"arg": "weight", "rank": 2}]},
            "no argument",
        ),
        (
            {"name": "e", "op": "aten.mm.default", "kind": "crash", "index": {"dim": 0, "at": "last"}},
            "only applies",
        ),
        ({"name": "f", "op": "aten.clone.default", "kind": "nan"}, "explicit device kernel"),
        ({"name": "g", "op": "aten.transpose.int", "kind": "nan"}, "is a view"),
        ({"name": "h", "op": "aten.mm.default", "kind": "nan", "colour": "red"}, "unknown key 'colour'"),
        (
            {"name": "i", "op": "aten.gelu.default", "kind": "substitute", "kwargs": {"approx": "tanh"}},
            "no argument",
        ),
    ],
)
def test_malformed_fault_names_the_entry(tmp_path, entry, needle):
    path = _fault_file(tmp_path, {"name": "fine", "op": "aten.mm.default", "kind": "nan"}, entry)
    with pytest.raises(FaultFileError) as info:
        faults.load(path)
    assert info.value.entry == entry["name"] and needle in str(info.value), str(info.value)
    assert entry["name"] in str(info.value) and path in str(info.value)
    assert faults.active() == []  # a bad file plants nothing


def test_malformed_files_duplicate_names_and_bad_yaml(tmp_path):
    dup = _fault_file(
        tmp_path,
        {"name": "x", "op": "aten.mm", "kind": "nan"},
        {"name": "x", "op": "aten.mm", "kind": "raise"},
    )
    with pytest.raises(FaultFileError, match="entry 'x': duplicate"):
        faults.load(dup)
    nameless = _fault_file(tmp_path, {"op": "aten.mm", "kind": "nan"})
    with pytest.raises(FaultFileError, match="entry '#0'"):
        faults.load(nameless)
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults: [ {name: a, op: aten.mm\n")
    with pytest.raises(FaultFileError, match="not valid YAML"):
        faults.load(bad)


def test_malformed_env_file_fails_the_import_clearly(tmp_path):
    path = _fault_file(tmp_path, {"name": "typo", "op": "aten.softmaxx", "kind": "nan"})
    proc = _python("import backend", {"NEURON_FAULTS": path}, timeout=120)
    assert proc.returncode != 0
    assert (
        "FaultFileError" in proc.stderr and "entry 'typo'" in proc.stderr and "does not exist" in proc.stderr
    )


def test_bundled_suite_loads_and_covers_every_class():
    suite = faults.load_suite()
    assert len(suite) >= 25
    assert {f.category for f in suite} >= {
        "numerics",
        "boundary",
        "backward",
        "compile",
        "shape",
        "hang",
        "crash",
        "fallback",
    }
    assert {f.kind for f in suite} >= {"perturb", "nan", "raise", "hang", "crash", "fallback", "substitute"}
    assert [faults.parse_fault(f.to_dict()) for f in suite] == suite  # the file format round-trips
    faults.load(faults.suite_path())
    assert [f.name for f in faults.active()] == [f.name for f in suite]


def test_no_fault_no_hook(monkeypatch):
    from backend import kernels

    calls = []
    monkeypatch.setattr(faults, "intercept", lambda *a, **k: calls.append(a) or a[1])
    torch.softmax(torch.ones(2, 2, device="neuron"), -1)
    assert kernels._faulted == frozenset() and calls == []
    with faults.planted(name="sm", op="aten._softmax", kind="nan"):
        assert "aten._softmax.default" in kernels._faulted
        torch.softmax(torch.ones(2, 2, device="neuron"), -1)
    assert len(calls) == 1 and kernels._faulted == frozenset()


def test_op_the_device_receives_decomposed_is_faulted_once():
    """aten.abs.default reaches the device as abs.out (a CompositeExplicitAutograd op): while a fault
    is planted on it, it gets a device kernel of its own; the registration goes with the fault."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    x = _x(3, 5).to("neuron")
    ref = x.abs().cpu()
    assert not has("aten::abs", "PrivateUse1")
    with faults.planted(name="abs", op="aten.abs.default", kind="perturb", rel=0.01):
        assert has("aten::abs", "PrivateUse1")
        out = x.abs().cpu()
    assert torch.allclose(((out - ref) / ref).abs(), torch.full_like(ref, 0.01), atol=1e-5)  # once, not twice
    assert faults.hits() == {"abs": 1}
    assert not has("aten::abs", "PrivateUse1") and torch.equal(x.abs().cpu(), ref)
