"""Replay: inputs honour constraints, comparison uses per-dtype and precision-mode tolerances."""

from __future__ import annotations

import pytest
import torch

from contracts.backends import get_backend
from registry.encoding import encode_args, signature
from registry.replay import NO_CPU_REFERENCE, CaseSpec, build_args, compare, materialize, replay, resolve_op
from registry.tolerances import tolerance_for

CPU = get_backend("cpu")


def _spec(op, args, kwargs=None, constraints=None):
    a, k = encode_args(args, kwargs or {})
    return CaseSpec(op, signature(a, k), constraints or {})


def _inputs(spec):
    import json

    sig = json.loads(spec.signature)
    from registry.constraints import infer_constraints

    cons = {**spec.constraints, **infer_constraints(spec.op, sig["a"], sig["k"])}
    built = build_args(sig["a"], sig["k"], cons, torch.Generator().manual_seed(0))
    return materialize(built[0], torch.device("cpu"))


def test_embedding_indices_stay_below_the_rows():
    spec = _spec("aten.embedding.default", (torch.zeros(7, 4), torch.zeros(50, dtype=torch.long)))
    weight, idx = _inputs(spec)
    assert idx.min() >= 0 and idx.max() < 7 and idx.unique().numel() > 1


def test_scatter_indices_are_unique_along_the_dim():
    spec = _spec(
        "aten.scatter.src", (torch.zeros(6, 5), 0, torch.zeros(4, 5, dtype=torch.long), torch.zeros(4, 5))
    )
    _, _, index, _ = _inputs(spec)
    for col in index.t():
        assert col.unique().numel() == 4 and col.max() < 6


def test_grouped_mm_offsets_are_sorted_and_end_at_the_grouped_dim():
    spec = _spec(
        "aten._grouped_mm.default",
        (torch.zeros(16, 8), torch.zeros(4, 8, 3), torch.zeros(4, dtype=torch.int32)),
    )
    offs = _inputs(spec)[2]
    assert torch.equal(offs, offs.sort().values) and int(offs[-1]) == 16


def test_strides_and_offsets_are_rebuilt():
    base = torch.zeros(40)
    spec = _spec("aten.neg.default", (base.as_strided((3, 4), (1, 5), 2),))
    (t,) = _inputs(spec)
    assert t.shape == (3, 4) and t.stride() == (1, 5) and t.storage_offset() == 2


def test_passing_case_reports_native_on_cpu_and_error_metric():
    r = replay(_spec("aten.addmm.default", (torch.zeros(3), torch.zeros(2, 4), torch.zeros(4, 3))), CPU)
    assert r.stage == "op" and r.status.value == "pass"
    assert r.metrics["native"] is True and r.metrics["max_abs_err"] == 0.0 and r.metrics["fallback_ops"] == []


def test_invalid_case_is_skipped_with_the_cpu_reason():
    r = replay(_spec("aten.mm.default", (torch.zeros(2, 3), torch.zeros(4, 5))), CPU)
    assert r.status.value == "skipped" and "cpu reference raised" in r.reason


def test_unreplayable_arguments_and_ops_are_skipped_not_raised():
    r = replay(CaseSpec("aten.neg.default", '{"a":[{"opaque":"Generator"}],"k":{}}'), CPU)
    assert r.status.value == "skipped" and "Generator" in r.reason
    r = replay(CaseSpec("aten.nope.default", '{"a":[],"k":{}}'), CPU)
    assert r.status.value == "skipped" and "does not exist" in r.reason


def test_random_ops_compare_metadata_only():
    r = replay(_spec("aten.normal_.default", (torch.zeros(16),)), CPU)
    assert r.status.value == "pass"


def test_tolerances_exact_for_ints_loose_for_16_bit_and_for_bf16_precision_mode():
    assert tolerance_for("aten.add.Tensor", "i64").exact
    assert (
        tolerance_for("aten.add.Tensor", "bf16").rtol
        > tolerance_for("aten.add.Tensor", "f16").rtol
        > tolerance_for("aten.add.Tensor", "f32").rtol
    )
    assert (
        tolerance_for("aten.mm.default", "f32", "bf16").atol_rms
        > tolerance_for("aten.mm.default", "f32", "exact").atol_rms
    )
    assert tolerance_for("aten.add.Tensor", "f32", "bf16") == tolerance_for("aten.add.Tensor", "f32", "exact")


def test_bf16_rounded_matmul_passes_only_in_bf16_mode():
    a, b = torch.randn(16, 64), torch.randn(64, 16)
    expected = [a @ b]
    actual = [a.bfloat16().float() @ b.bfloat16().float()]
    assert compare("aten.mm.default", expected, actual, "bf16").ok
    assert not compare("aten.mm.default", expected, actual, "exact").ok
    worse = [expected[0] + 0.5]
    assert not compare("aten.mm.default", expected, worse, "bf16").ok


def test_wrong_shape_or_integer_difference_fails():
    assert not compare("aten.neg.default", [torch.zeros(2)], [torch.zeros(3)], "exact").ok
    cmp = compare("aten.add.Tensor", [torch.tensor([1, 2])], [torch.tensor([1, 3])], "exact")
    assert not cmp.ok and cmp.max_abs_err == 1.0


def test_precision_mode_comes_from_the_backend():
    """The adapter reports the device's own setting (backend.set_precision / NEURON_PRECISION)."""
    import backend

    assert CPU.precision_mode() == "exact"
    neuron = get_backend("neuron")
    previous = backend.set_precision("exact")
    try:
        assert neuron.precision_mode() == "exact"
        backend.set_precision("bf16")
        assert neuron.precision_mode() == "bf16"
    finally:
        backend.set_precision(previous)


def test_a_matmul_1pct_off_fails_in_bf16_mode_because_the_reference_rounds_as_the_device_declares():
    """In bf16 mode the device rounds mm's inputs (rounded_inputs()); the reference rounds them too,
    so the case is judged with float32 tolerances and a 1% error no longer hides under bf16 ones."""
    import backend
    from backend import faults

    neuron = get_backend("neuron")
    previous = backend.set_precision("bf16")
    spec = _spec("aten.mm.default", (torch.randn(32, 96), torch.randn(96, 16)))
    try:
        clean = replay(spec, neuron, neuron.precision_mode())
        assert clean.status.value == "pass" and clean.metrics["reference"] == "device-rounding"
        with faults.planted(name="mm", op="aten.mm.default", kind="perturb", rel=0.01):
            bad = replay(spec, neuron, neuron.precision_mode())
        assert bad.status.value == "fail" and bad.failing_op == "aten.mm.default"
        assert "rtol=1.3e-06" in bad.reason  # the float32 tolerance, not the bf16 mode's
        backend.set_precision("exact")
        exact = replay(spec, neuron, neuron.precision_mode())
        assert exact.status.value == "pass" and "reference" not in exact.metrics  # nothing rounded
    finally:
        backend.set_precision(previous)
        faults.clear()


def test_ctc_loss_compares_log_alpha_by_shape_only():
    """_ctc_loss's log_alpha (output 1) is written only up to each sample's input length; the rest
    is uninitialized memory, which differs between two runs: comparing it is no verdict."""
    log_probs = torch.randn(12, 2, 32).log_softmax(-1)
    spec = _spec(
        "aten._ctc_loss.default",
        (log_probs, torch.zeros(8, dtype=torch.long), [12, 9], [4, 4]),
        constraints={"a.1": {"kind": "range", "low": 1, "high": 32, "source": "observed"}},
    )
    result = replay(spec, get_backend("neuron"))
    assert result.status.value == "pass", result.reason
    # the loss itself (output 0) is still compared
    e = [torch.tensor([1.0, 2.0]), torch.zeros(2, 12, 9)]
    assert not compare(
        "aten._ctc_loss.default", e, [torch.tensor([1.0, 2.5]), torch.ones(2, 12, 9)], "exact"
    ).ok
    assert compare("aten._ctc_loss.default", e, [torch.tensor([1.0, 2.0]), torch.ones(2, 12, 9)], "exact").ok


# ------------------------------------------------ a call the CPU reference cannot compute


def _blame(result, backend):
    """The blame the unit tier's rules give a replay result (harness/data/blame_rules.yaml)."""
    from contracts.records import CaseOutcome
    from harness.blame.rules import complete_outcome

    return complete_outcome(CaseOutcome("c", "unit", [result.to_dict()]), backend).stages[0]["blame"]


@pytest.mark.parametrize("backend", ["cpu", "neuron"])
@pytest.mark.parametrize(
    "op, args",
    [
        ("aten.histc.default", (torch.zeros(64, dtype=torch.int32), 8, 0, 7)),  # an MoE router's counts
        ("aten.logcumsumexp.default", (torch.zeros(4, 6, dtype=torch.int64), 1)),
    ],
)
def test_a_call_whose_dtype_the_cpu_has_no_kernel_for_has_no_reference_and_is_never_the_harness(
    op, args, backend
):
    """A device runs these (the recording is the proof); PyTorch's CPU kernel does not dispatch the
    dtype, whatever values the replay builds: no reference, PyTorch's gap, not the harness'."""
    with pytest.raises(NotImplementedError):
        resolve_op(op)(*args)  # the premise: PyTorch's CPU lacks the kernel for this dtype
    result = replay(_spec(op, args), get_backend(backend))
    assert result.status.value == "skipped" and result.reason.startswith(NO_CPU_REFERENCE)
    assert "not implemented for" in result.reason  # the CPU's own words
    assert _blame(result, backend) == "upstream"


def test_a_call_the_cpu_rejects_for_what_the_harness_built_stays_the_harness():
    result = replay(_spec("aten.mm.default", (torch.zeros(2, 3), torch.zeros(4, 5))), get_backend("neuron"))
    assert result.reason.startswith("cpu reference raised") and _blame(result, "neuron") == "harness"


class _Placeholders(torch.nn.Module):
    """What models do with masks and integer ids: features scattered into the positions of
    placeholder tokens through a mask expanded over the hidden dim (a multimodal prompt), and a
    histogram of integer ids (an MoE router counting tokens per expert)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 8)
        self.features = torch.nn.Parameter(torch.randn(3, 8))

    def forward(self, ids):
        h = self.embed(ids)
        mask = (ids == 1).unsqueeze(-1).expand_as(h)  # a view: stride 0 along the hidden dim
        counts = torch.histc(ids.int(), bins=5, min=0, max=4)
        return (h.masked_scatter(mask, self.features) * counts.sum().to(h.dtype),)


def test_recorded_mask_and_histogram_calls_replay_with_a_verdict_that_is_not_the_harness():
    """Recorded on the device from a model's forward and backward, every call replays: the expanded
    masks of masked_scatter and its backward pass, histc on int32 has no CPU reference."""
    from registry.recorder import record_workload

    neuron = get_backend("neuron")

    def build():
        return _Placeholders().to(neuron.device)

    def inputs(model):
        return {"ids": torch.tensor([[0, 1, 2, 1, 3, 4], [1, 2, 3, 4, 0, 2]]).to(neuron.device)}

    outcome = record_workload(build, inputs, model_id="m", prefer_fake=False, device=neuron.device.type)
    assert outcome.mode == "real", outcome.error
    verdicts = {}
    for entry in outcome.entries:
        result = replay(CaseSpec.from_entry(entry), neuron)
        verdicts[entry.op] = (result.status.value, _blame(result, "neuron"))
        assert verdicts[entry.op][1] != "harness", (entry.op, entry.signature, result.reason)
    assert verdicts["aten.masked_scatter.default"] == ("pass", "")
    assert verdicts["aten.masked_scatter_backward.default"] == ("pass", "")
    assert verdicts["aten.histc.default"] == ("skipped", "upstream")
