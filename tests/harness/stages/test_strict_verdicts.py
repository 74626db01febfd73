"""Verdicts that catch backend bugs: a bug planted in the simulated device (backend.faults) fails
the stage that should see it, in the default bf16 precision mode; the clean device passes."""

from __future__ import annotations

import pytest

from backend import faults
from contracts.backends import get_backend
from contracts.records import ModelSpec
from contracts.status import Status
from harness.stages.check import check_model
from harness.stages.compare import compare_with_eager
from harness.stages.compile import none_as_zero

BERT = ModelSpec("catalog/bert/BertForMaskedLM", "bert", "BertForMaskedLM")
LLAMA = ModelSpec("catalog/llama/LlamaForCausalLM", "llama", "LlamaForCausalLM")
EAGER = ["load", "forward", "backward", "numerics"]


@pytest.fixture(autouse=True)
def bf16_mode():
    adapter = get_backend("neuron")
    assert adapter.precision_mode() == "bf16", "these tests are about the default bf16 mode"
    faults.clear()
    faults.reset_hits()
    yield adapter
    faults.clear()


def _check(spec, stages, **fault):
    if not fault:
        return check_model(spec, backend="neuron", stages=stages)
    with faults.planted(name="planted", **fault):
        result = check_model(spec, backend="neuron", stages=stages)
    assert faults.hits().get("planted"), "the planted fault never fired"
    return result


@pytest.mark.parametrize("spec", [BERT, LLAMA], ids=["bert", "llama"])
def test_clean_device_passes_numerics_with_its_gradients_checked(spec):
    r = _check(spec, EAGER)
    n = r.stages["numerics"]
    assert n.status == Status.PASS, n.reason
    assert n.metrics["reference"] == "cpu_float64" and n.metrics["rounding"].startswith("bf16 inputs")
    assert n.metrics["tolerance_class"] == "float32" and n.metrics["method"] in ("allclose", "rmse")
    grads = n.metrics["gradients"]
    assert grads["passed"] and grads["tensors"] == r.stages["backward"].metrics["params_with_grad"]


@pytest.mark.parametrize(
    "spec,op",
    [
        (BERT, "aten._softmax.default"),
        (BERT, "aten.gelu.default"),
        (BERT, "aten.native_layer_norm.default"),
        (LLAMA, "aten._softmax.default"),
        (LLAMA, "aten.silu.default"),
        (LLAMA, "aten.rsqrt.default"),
    ],
    ids=["bert-softmax", "bert-gelu", "bert-layer_norm", "llama-softmax", "llama-silu", "llama-rsqrt"],
)
def test_a_one_percent_error_in_one_op_fails_numerics(spec, op):
    r = _check(spec, EAGER, op=op, kind="perturb", rel=0.01)
    assert r.stages["forward"].status == Status.PASS
    n = r.stages["numerics"]
    assert n.status == Status.FAIL and n.reason.startswith("output "), n.reason
    assert n.metrics["rmse"] > n.metrics["allowed_rmse"]


def test_a_backward_only_error_fails_the_gradient_check_naming_the_parameter():
    # layer-norm's weight gradient 2% off; the forward is untouched
    r = _check(BERT, EAGER, op="aten.native_layer_norm_backward.default", kind="perturb", rel=0.02, output=1)
    n = r.stages["numerics"]
    assert n.status == Status.FAIL, n.metrics
    assert n.metrics["passed"] is True  # the outputs are right
    worst = n.metrics["gradients"]["name"]
    assert worst.endswith("LayerNorm.weight") and n.reason.startswith(f"gradient of {worst}:")


def test_compile_is_not_attempted_after_a_forward_failure_the_cpu_shares(monkeypatch):
    import harness.stages.check

    real = harness.stages.check.make_inputs

    def broken_inputs(
        model, config, *args, **kwargs
    ):  # the harness' own bug: token ids beyond the vocabulary
        batch = real(model, config, *args, **kwargs)
        batch.kwargs["input_ids"] = batch.kwargs["input_ids"] + config.vocab_size
        return batch

    monkeypatch.setattr(harness.stages.check, "make_inputs", broken_inputs)
    r = check_model(BERT, backend="neuron", stages=["load", "forward", "compile"])
    assert r.stages["forward"].status == Status.ERROR
    c = r.stages["compile"]
    assert c.status == Status.NOT_ATTEMPTED
    assert c.reason.startswith("forward error on the cpu reference too: IndexError"), c.reason
    from harness.blame.rules import blocked_by

    assert blocked_by({"status": c.status.value, "reason": c.reason}) == "forward"  # carries forward's blame


@pytest.mark.slow
def test_compiled_training_step_matches_eager_and_records_both_graphs():
    r = _check(BERT, ["load", "forward", "backward", "compile"])
    c = r.stages["compile"]
    assert c.status == Status.PASS, c.reason
    m = c.metrics
    assert m["forward_graphs"] >= 1 and m["backward_graphs"] >= 1 and m["repeat_compiles"] == 0
    assert m["vs_eager"]["passed"] and m["vs_eager"]["tensors"] > 2 * r.stages["forward"].metrics["outputs"]
    assert r.graphs == m["forward_graphs"] + m["backward_graphs"] and r.recompiles == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault,names",
    [
        (dict(op="aten.gelu.default", kind="perturb", rel=0.01, scope="compiled"), "step 1 output "),
        (
            dict(
                op="aten.native_layer_norm_backward.default",
                kind="perturb",
                rel=0.02,
                output=1,
                scope="compiled",
            ),
            "step 1 gradient of ",
        ),
    ],
    ids=["forward", "backward"],
)
def test_a_compile_only_error_fails_compile_naming_the_worst_tensor(fault, names):
    r = _check(BERT, ["load", "forward", "backward", "compile", "numerics"], **fault)
    assert r.stages["numerics"].status == Status.PASS  # eager is right
    c = r.stages["compile"]
    assert c.status == Status.FAIL, c.reason
    assert c.metrics["vs_eager"]["name"].startswith(names)
    assert c.reason.startswith(f"compiled step differs from eager: {names}")


@pytest.mark.slow
def test_asked_for_alone_compile_still_compares_with_eager_and_catches_a_compile_only_error():
    r = _check(BERT, ["compile"], op="aten.gelu.default", kind="perturb", rel=0.01, scope="compiled")
    assert r.stages["forward"].status == r.stages["backward"].status == Status.PASS  # run to compare with
    c = r.stages["compile"]
    assert (
        c.metrics["vs_eager"].get("compared") is not False
    )  # compared: before, "no eager forward to compare with"
    assert c.status == Status.FAIL and c.reason.startswith(
        "compiled step differs from eager: step 1 output "
    ), c.reason


@pytest.mark.slow
def test_compile_runs_where_only_the_device_forward_failed():
    r = _check(BERT, ["load", "forward", "compile"], op="aten.gelu.default", kind="raise", scope="eager")
    assert r.stages["forward"].status == Status.ERROR
    c = r.stages["compile"]
    assert c.status == Status.PASS, c.reason  # a useful fact: compiled, it runs
    assert c.metrics["vs_eager"]["compared"] is False


def test_a_gradient_none_in_one_step_and_zero_in_the_other_is_the_same_gradient():
    """As PyTorch's accuracy check (torch._dynamo.testing.collect_results): AOTAutograd gives zero
    gradients to parameters whose outputs the loss does not use, where eager leaves None."""
    import torch

    used, unused = torch.ones(3), torch.zeros(2, 2)
    compiled, eager, filled = none_as_zero({"w": used, "head.bias": unused}, {"w": used.clone()})
    assert filled == ["head.bias"] and torch.equal(eager["head.bias"], unused)
    assert compare_with_eager(compiled, eager).passed
    # either side: a zero in eager where the compiled step has none
    assert none_as_zero({"w": used}, {"w": used, "b": unused})[2] == ["b"]
    # a present gradient with any non-zero value is still missing on the other side
    compiled, eager, filled = none_as_zero({"w": used, "head.bias": torch.tensor([0.0, 1e-30])}, {"w": used})
    assert filled == []
    c = compare_with_eager(compiled, eager)
    assert not c.passed and c.reason == "head.bias: missing in the eager run"


@pytest.mark.slow
def test_parameters_the_loss_does_not_use_pass_compile_and_are_named():
    """Siglip2's attention-pooling head is not used by the image-classification loss: eager leaves
    its gradients None, the compiled step gives zeros (before: a `backend` compile failure)."""
    spec = ModelSpec(
        "catalog/siglip2/Siglip2ForImageClassification", "siglip2", "Siglip2ForImageClassification"
    )
    r = _check(spec, ["load", "forward", "backward", "compile"])
    c = r.stages["compile"]
    assert c.status == Status.PASS, c.reason
    said = c.metrics["vs_eager"]["grads_none_as_zero"]
    assert said["count"] > 0 and all(n.startswith("vision_model.head.") for n in said["first"])
