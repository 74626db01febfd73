"""Recording: every aten call of forward, backward and optimizer, with value constraints."""

from __future__ import annotations

import pytest
import torch

from registry.encoding import parse_signature
from registry.recorder import OpRecorder, record_workload
from tests.registry.registry_fixtures import bert_inputs, tiny_bert


def test_records_all_phases_with_counts(bert_outcome):
    assert bert_outcome.mode == "real"
    assert bert_outcome.phases == ["inference", "forward", "backward", "optimizer"]
    phases = {p.phase for e in bert_outcome.entries for p in e.provenance}
    assert phases == {"inference", "forward", "backward", "optimizer"}
    assert sum(e.count for e in bert_outcome.entries) == bert_outcome.calls
    ops = {e.op for e in bert_outcome.entries}
    assert {
        "aten.embedding.default",
        "aten.embedding_dense_backward.default",
        "aten.addmm.default",
        "aten.nll_loss_forward.default",
    } <= ops


def test_embedding_indices_are_bounded_by_the_weight_rows(bert_outcome):
    emb = [e for e in bert_outcome.entries if e.op == "aten.embedding.default"]
    by_rows = {parse_signature(e.signature)[0][0]["T"][0]: e.constraints["a.1"] for e in emb}
    # the word embedding's padding index (pad_token_id 0) is a special value replay plants
    assert by_rows[97] == {"kind": "index", "low": 0, "high": 97, "source": "semantics", "special": [0]}
    assert by_rows[32]["high"] == 32 and "special" not in by_rows[32]  # position embeddings: padding_idx -1


def test_nll_loss_targets_are_bounded_by_the_class_dim(bert_outcome):
    (nll,) = [e for e in bert_outcome.entries if e.op == "aten.nll_loss_forward.default"]
    assert nll.constraints["a.1"]["high"] == 97
    assert nll.constraints["a.1"]["special"] == [-100]  # the ignore index


def test_real_recording_observes_integer_ranges_and_provenance(bert_outcome):
    assert all(
        p.model == "tiny/bert" and p.weight == 10.0 and p.mode == "real"
        for e in bert_outcome.entries
        for p in e.provenance
    )
    observed = [c for e in bert_outcome.entries for c in e.constraints.values() if c["source"] == "observed"]
    assert observed and all(c["kind"] in ("range", "mask") for c in observed)


def test_fake_tensors_record_the_same_signatures_without_values():
    # both under a Python dispatch mode (FakeTensorMode / the mode recorder): the same program
    real = record_workload(tiny_bert, bert_inputs, model_id="tiny/bert", prefer_fake=False, native=False)
    fake = record_workload(tiny_bert, bert_inputs, model_id="tiny/bert", prefer_fake=True)
    assert fake.mode == "fake" and fake.fake_error == ""
    assert {(e.op, e.signature) for e in fake.entries} == {(e.op, e.signature) for e in real.entries}
    assert all(c["source"] == "semantics" for e in fake.entries for c in e.constraints.values())


def _by_call(entries):
    return {
        (e.op, e.signature): (sorted((p.phase, p.count) for p in e.provenance), e.constraints, e.outputs)
        for e in entries
    }


#: calls PyTorch makes differently while a Python dispatch mode is active (every tensor then counts
#: as a subclass): reshape views instead of _reshape_alias, out-of-place gradient accumulation,
#: AccumulateGrad detaching. The native hook records the program without a mode.
_MODE_SENSITIVE = {
    "aten.view.default",
    "aten._reshape_alias.default",
    "aten.add.Tensor",
    "aten.add_.Tensor",
    "aten.detach.default",
}


def test_native_hook_records_what_the_mode_records():
    from backend import native

    if native.module() is None:
        pytest.skip(f"backend.native is not loaded: {native.status()['reason']}")
    python = record_workload(tiny_bert, bert_inputs, model_id="tiny/bert", prefer_fake=False, native=False)
    fast = record_workload(tiny_bert, bert_inputs, model_id="tiny/bert", prefer_fake=False)
    assert python.mode == fast.mode == "real"
    a, b = _by_call(python.entries), _by_call(fast.entries)
    same = {k for k in a if k[0] not in _MODE_SENSITIVE}
    assert same and same == {k for k in b if k[0] not in _MODE_SENSITIVE}
    assert all(a[k] == b[k] for k in same)  # counts per phase, constraints, outputs
    assert {k[0] for k in a} ^ {k[0] for k in b} <= _MODE_SENSITIVE
    assert fast.calls == sum(e.count for e in fast.entries)


def test_native_hook_counts_repeats_and_pauses_like_the_mode():
    from backend import native

    if native.module() is None:
        pytest.skip(f"backend.native is not loaded: {native.status()['reason']}")
    results = []
    for use_native in (False, True):
        rec = OpRecorder(native=use_native)
        x = torch.randn(3)
        rec.phase = "one"
        with rec:
            for _ in range(5):
                torch.mul(x, 2.5)
            torch.mul(x, 0.5)  # a Python number is part of the signature
            with rec.paused():
                torch.neg(x)
        rec.phase = "two"
        with rec:
            torch.mul(x, 2.5)
        results.append((_by_call(rec.entries("m", "manual", "real", 0)), rec.calls))
    assert results[0] == results[1]
    calls, total = results[1]
    assert total == 7 and not any(op == "aten.neg.default" for op, _ in calls)


def test_native_fingerprints_group_calls_as_the_python_fingerprint_does():
    """The native hook keys a new call by its own fingerprint's bytes: calls Python keys alike (every
    NaN, a device named with or without its index, -0.0 apart from 0.0) must be one signature there
    too, or a recording would split (or merge) rows the mode recorder keeps apart."""
    import struct

    from backend import native

    if native.module() is None:
        pytest.skip(f"backend.native is not loaded: {native.status()['reason']}")
    other_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]
    results = []
    for use_native in (False, True):
        rec = OpRecorder(native=use_native)
        x = torch.randn(3)
        with rec:
            torch.mul(x, float("nan"))
            torch.mul(x, other_nan)
            torch.mul(x, 0.0)
            torch.mul(x, -0.0)
            torch.zeros(2, device="cpu")
            torch.zeros(2, device="cpu:0")
            torch.full((2,), 1.5)
            torch.full((2,), 1.5)
        results.append((_by_call(rec.entries("m", "manual", "real", 0)), rec.calls))
    assert results[0] == results[1]
    calls, total = results[1]
    assert total == 8
    counts = {sig: prov[0][1] for (op, sig), (prov, _, _) in calls.items() if op == "aten.mul.Tensor"}
    assert sorted(counts.values()) == [1, 1, 2]  # the NaNs together, 0.0 and -0.0 apart


class _DataDependent(torch.nn.Module):
    """nonzero's output shape depends on values: FakeTensorMode cannot run it."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y[torch.nonzero(y > 0, as_tuple=True)].sum() + y.sum()


def test_fake_failure_falls_back_to_real_and_says_why():
    out = record_workload(
        _DataDependent, lambda m: {"x": torch.randn(3, 4)}, model_id="dd", phases=("inference",)
    )
    assert out.mode == "real"
    assert (
        "nonzero" in out.fake_error
        or "DynamicOutputShape" in out.fake_error
        or "DataDependent" in out.fake_error
    )
    assert "aten.nonzero.default" in {e.op for e in out.entries}


def test_a_model_that_fails_is_an_outcome_not_an_exception():
    def broken():
        raise ValueError("no such config")

    out = record_workload(broken, lambda m: {}, model_id="broken")
    assert out.mode == "failed" and "ValueError: no such config" in out.error and out.entries == []


def test_recorder_counts_repeated_calls_once_per_signature():
    rec = OpRecorder()
    x = torch.randn(3)
    with rec:
        for _ in range(5):
            torch.neg(x)
        torch.neg(torch.randn(4))
    (e3, e4) = sorted(
        (e for e in rec.entries("m", "manual", "real", 0) if e.op == "aten.neg.default"),
        key=lambda e: e.signature,
    )
    assert {e3.count, e4.count} == {5, 1}


def test_a_model_failing_part_way_keeps_the_calls_made_before():
    class Half(torch.nn.Module):
        def forward(self, x):
            torch.neg(x)  # recorded before the failure
            raise RuntimeError("device kernel failed")

    out = record_workload(
        Half, lambda m: {"x": torch.randn(3)}, model_id="half", phases=("inference",), prefer_fake=False
    )
    assert out.mode == "failed" and "device kernel failed" in out.error
    assert [e.op for e in out.entries] == ["aten.neg.default"]


@pytest.mark.parametrize("use_native", [False, True])
def test_a_call_that_raised_is_not_an_entry(use_native):
    """A model's invalid call (shapes that do not multiply) never completed: as a unit case it
    would only make the CPU reference raise."""

    class Mismatched(torch.nn.Module):
        def forward(self, x):
            return torch.neg(x) @ torch.randn(5, 2)

    out = record_workload(
        Mismatched,
        lambda m: {"x": torch.randn(3, 4)},
        model_id="mm",
        phases=("inference",),
        prefer_fake=False,
        native=use_native,
    )
    assert out.mode == "failed" and "cannot be multiplied" in out.error
    ops = [e.op for e in out.entries]
    assert "aten.neg.default" in ops and not any(op.startswith("aten.mm") for op in ops)
    assert all(e.count > 0 for e in out.entries)


@pytest.mark.parametrize("use_native", [False, True])
def test_only_the_calls_the_device_receives_are_recorded(use_native):
    """A model part left on the CPU (a position grid, a CPU-only decomposition inside a device
    kernel) is not the device's op mix: recording for `neuron` keeps only calls on that device."""
    from contracts.backends import get_backend

    device = get_backend("neuron").device
    rec = OpRecorder(native=use_native, device=device.type)
    cpu, dev = torch.randn(3, 5), torch.randn(3, 5).to(device)
    with rec:
        torch.exp(cpu)  # same shapes on the CPU first: must not hide the device's call below
        torch.exp(dev)
        torch.exp(dev)
        torch.tanh(cpu)
        cpu.to(device)  # a copy onto the device is a call the device receives
        torch.zeros(2, device=device)
        torch.zeros(2)
    entries = rec.entries("m", "manual", "real", 0)
    ops = {e.op: e for e in entries}
    assert "aten.tanh.default" not in ops and "aten.exp.default" in ops
    assert ops["aten.exp.default"].count == 2  # the CPU call with the same signature is not counted
    assert "aten._to_copy.default" in ops
    assert [e for e in entries if e.op == "aten.zeros.default"] and all(
        "cpu" not in e.signature for e in entries if e.op == "aten.zeros.default"
    )
    assert rec.calls == sum(e.count for e in entries)
    on_cpu = OpRecorder(native=use_native, device="cpu")
    with on_cpu:
        torch.zeros(2)  # naming no device: the CPU's
        torch.exp(dev)
    assert {e.op for e in on_cpu.entries("m", "manual", "real", 0)} == {"aten.zeros.default"}
    everything = OpRecorder(native=use_native)
    with everything:
        torch.tanh(cpu)
    assert "aten.tanh.default" in {e.op for e in everything.entries("m", "manual", "real", 0)}
