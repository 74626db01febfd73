"""The numerics gate: allclose with the class tolerance, else the fp64-RMSE gate; cosine only by rule."""

from __future__ import annotations

import pytest
import torch

from contracts.errors import RuleFileError
from contracts.rulefiles import load_rules, resource
from harness.stages import compare as numerics
from harness.stages.compare import (
    compare,
    compare_named,
    compare_outputs,
    compare_with_eager,
    tolerance,
    tolerance_class,
)


def ref(n=1000, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_allclose_passes_float32_rounding():
    r = ref()
    c = compare(r.float(), r)
    assert c.passed and c.method == "allclose" and c.tolerance_class == "float32"


def test_rmse_gate_accepts_error_no_worse_than_eager():
    r = ref()
    noise = ref(seed=1) * 5e-3
    eager = (r + noise).float()
    device = (r + noise * 1.5).float()  # beyond allclose, but within 2x eager's RMSE
    c = compare(device, r, eager)
    assert c.passed and c.method == "rmse"
    assert c.rmse <= 2 * c.eager_rmse and c.ratio <= 1


def test_a_one_percent_error_fails_even_where_cosine_would_pass():
    r = ref()
    device = (r * 1.01).float()  # a 1% scale error: cosine similarity is 1.0
    c = compare(device, r, r.float())
    assert not c.passed and c.method == "rmse" and c.cosine is None
    assert "rmse" in c.reason and c.ratio > 1
    assert not compare(device, r).passed  # no eager yardstick: allclose alone decides


def test_cosine_only_where_a_documented_rule_asks(monkeypatch):
    r = ref()
    device = (r * 1.01).float()
    rule = numerics.CosineRule(architecture="NoisyModel*", tensor="logits", min=0.99, reason="known noisy")
    ruled = numerics.settings().model_copy(update={"cosine_rules": [rule]})
    monkeypatch.setattr(numerics, "settings", lambda: ruled)
    ok = compare(device, r, r.float(), name="logits", architecture="NoisyModelForX")
    assert ok.passed and ok.method == "cosine" and ok.cosine > 0.99 and "known noisy" in ok.reason
    assert not compare(device, r, r.float(), name="logits", architecture="BertForMaskedLM").passed
    assert not compare(device, r, r.float(), name="pooler", architecture="NoisyModelForX").passed


def test_every_threshold_is_data_with_a_reason():
    text = resource("harness", "data/numerics.yaml").read_text()
    for key in ("float32:", "bfloat16:", "undeclared_rounding:", "rmse_multiplier:", "cosine_rules:"):
        line = next(i for i, ln in enumerate(text.splitlines()) if ln.strip().startswith(key))
        before = text.splitlines()[max(0, line - 3) : line + 3]
        assert any("#" in ln for ln in before), f"{key} has no comment saying why"


def test_a_typo_in_the_numerics_rules_names_file_entry_and_key(tmp_path):
    text = resource("harness", "data/numerics.yaml").read_text()
    bad = tmp_path / "numerics.yaml"
    bad.write_text(text.replace("    rtol: 1.0e-3\n", "    rtoll: 1.0e-3\n"))
    with pytest.raises(RuleFileError) as info:
        load_rules(numerics.NumericsRules, bad)
    assert str(bad) in str(info.value)
    assert "entry classes.float16: unknown key 'rtoll'" in str(info.value)
    missing = tmp_path / "missing_class.yaml"
    missing.write_text(text.replace("  float64:\n", "  float65:\n"))
    with pytest.raises(RuleFileError, match="float64"):
        load_rules(numerics.NumericsRules, missing)


def test_shape_and_nonfinite_mismatch_fail():
    r = ref()
    assert not compare(r[:10].float(), r).passed
    bad = r.float().clone()
    bad[0] = float("nan")
    c = compare(bad, r)
    assert not c.passed and c.method == "nonfinite"


def test_tolerance_follows_what_the_device_computes_in():
    assert tolerance_class(torch.float32) == "float32"
    assert tolerance_class(torch.bfloat16) == "bfloat16"
    assert tolerance_class(torch.float32, undeclared_rounding=True) == "undeclared_rounding"
    assert tolerance("bfloat16").rtol > tolerance("float32").rtol
    assert tolerance("float32").rtol <= 1e-4  # dynamo's fp32 accuracy tolerance
    r = ref()
    assert compare(r.to(torch.bfloat16), r).passed
    assert not compare(r.float() + 5e-3, r).passed


def test_worst_tensor_decides_and_is_named():
    r = ref()
    out_ref = {"logits": r, "hidden": r * 2}
    good = {"logits": r.float(), "hidden": (r * 2).float()}
    bad = {"logits": r.float(), "hidden": (-r * 2).float()}
    assert compare_outputs(good, out_ref).passed
    c = compare_outputs(bad, out_ref)
    assert not c.passed and c.tensors == 2 and c.name == "hidden" and c.reason.startswith("hidden:")


def test_named_gradients_missing_on_one_side_fail():
    r = ref()
    c = compare_named({"a.weight": r.float()}, {"a.weight": r, "b.bias": r})
    assert not c.passed and c.method == "missing" and c.name == "b.bias"


@pytest.mark.parametrize("error", [0.0, 1e-2])
def test_compile_against_eager_uses_the_truth_only_when_needed(error):
    r = ref()
    eager = {"logits": (r + ref(seed=3) * 1e-6).float()}
    compiled = {"logits": (eager["logits"].double() * (1 + error)).float()}
    calls = []

    def truth():
        calls.append(1)
        return {"logits": r}

    c = compare_with_eager(compiled, eager, truth)
    assert c.passed is (error == 0.0)
    assert calls == ([] if error == 0.0 else [1])
