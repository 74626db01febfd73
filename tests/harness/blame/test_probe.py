"""Blame on real architectures: the device re-run on cpu, the upstream probes, a missing package."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from contracts.records import ModelSpec, StageResult
from contracts.status import Status
from harness.blame.compile import same_way
from harness.blame.probe import check_with_blame, missing_package
from harness.cli.check import render_table

BERT = ModelSpec("catalog/bert", "bert", "BertModel")
STAGES = ["load", "forward", "backward"]


@pytest.fixture
def planted():
    """Faults planted in the simulated device (backend.faults), removed after the test."""
    from backend import faults

    yield faults.planted
    faults.clear()


def test_a_device_only_failure_is_the_backends(planted):
    with planted(op="aten.gelu", kind="raise"):
        result = check_with_blame(BERT, "neuron", STAGES)
    fwd = result.stages["forward"]
    assert fwd.status is Status.ERROR and "gelu" in (fwd.failing_op + fwd.message)
    assert fwd.blame == "backend"
    ev = fwd.blame_evidence
    assert ev["reference_backend"] == "cpu" and ev["reference"]["status"] == "pass"
    assert ev["same_model_and_inputs"] is True  # the very CPU model and tensors the device copy came from
    assert result.stages["backward"].blame == "backend"  # not attempted because of the device's failure
    assert result.stages["load"].blame == ""
    table = render_table(result)
    assert "blame" in table.splitlines()[1] and "backend" in table and "the reference passes" in table


def test_a_wrong_answer_of_the_device_is_the_backends(planted):
    with planted(op="aten.gelu", kind="nan"):
        result = check_with_blame(BERT, "neuron", ["load", "forward", "numerics"])
    num = result.stages["numerics"]
    assert num.status is Status.FAIL and num.blame == "backend"
    assert num.blame_evidence["reference"]["status"] == "pass"


def test_a_broken_input_recipe_is_the_harness(monkeypatch):
    """Inputs the harness got wrong fail on cpu too; the unshrunk model does not fail the same way with
    inputs of its own (or there are none independent of the harness), so nobody but the harness is to
    blame."""
    import harness.stages.check as check
    from harness.build.inputs import make_inputs

    def broken(model, config, architecture, seed=0, **kw):
        batch = make_inputs(model, config, architecture, seed=seed, **kw)
        batch.kwargs["input_ids"] = batch.kwargs["input_ids"][:, :, None]  # a recipe with a wrong layout
        return batch

    monkeypatch.setattr(check, "make_inputs", broken)
    result = check_with_blame(BERT, "neuron", STAGES)
    fwd = result.stages["forward"]
    assert fwd.status is Status.ERROR and fwd.blame == "harness"
    ev = fwd.blame_evidence
    assert ev["reference"]["status"] == "error" and ev["reference_evidence"]["fake_run"]["status"] != "error"
    assert ev["reference_evidence"]["default_build"]["status"] == "pass"


def test_a_type_whose_default_config_does_not_build_is_upstream():
    """chameleon's own default config does not build its class in transformers (no vocabulary_map)."""
    result = check_with_blame(ModelSpec("catalog/chameleon", "chameleon", ""), "neuron", STAGES)
    load = result.stages["load"]
    assert load.status is Status.ERROR and load.blame == "upstream"
    ref_ev = load.blame_evidence["reference_evidence"]
    assert ref_ev["rule"] == "upstream.default_build" and ref_ev["default_build"]["status"] == "error"
    assert {result.stages[s].blame for s in ("forward", "backward")} == {"upstream"}


def test_a_failure_transformers_itself_makes_the_same_way_is_upstream(monkeypatch):
    """A bug planted in the transformers class fails the shrunk model on cpu and the unshrunk default
    under FakeTensorMode fed by the model's own image processor (different sizes, the same message
    once numbers are masked)."""
    from transformers.models.vit import modeling_vit

    def forward(self, pixel_values=None, **kwargs):
        raise ValueError(f"planted upstream bug: {pixel_values.shape[-1]} pixels wide is not supported")

    monkeypatch.setattr(modeling_vit.ViTModel, "forward", forward)
    result = check_with_blame(ModelSpec("catalog/vit", "vit", "ViTModel"), "cpu", STAGES)
    fwd = result.stages["forward"]
    assert fwd.blame == "upstream" and fwd.blame_evidence["rule"] == "upstream.fake_run"
    assert fwd.blame_evidence["fake_run"]["error_class"] == "ValueError"
    assert fwd.blame_evidence["on_reference"] is True


def test_inputs_the_harness_synthesized_make_no_upstream_verdict(monkeypatch):
    """The same planted bug in a text model: its token ids are the harness' (no tokenizer offline), so the
    fake run is not independent of the harness and the row stays the harness'."""
    from transformers.models.bert import modeling_bert

    def forward(self, input_ids=None, **kwargs):
        raise ValueError(f"planted upstream bug: hidden size {self.config.hidden_size} is not supported")

    monkeypatch.setattr(modeling_bert.BertModel, "forward", forward)
    fwd = check_with_blame(BERT, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "harness" and fwd.blame_evidence["fake_run"]["status"] == "not_run"
    assert "input_ids=synthetic" in fwd.blame_evidence["fake_run"]["harness_inputs"]


def test_a_missing_input_is_always_the_harness(monkeypatch):
    import harness.stages.check as check
    from harness.build.inputs import make_inputs

    def without_ids(model, config, architecture, seed=0, **kw):
        batch = make_inputs(model, config, architecture, seed=seed, **kw)
        batch.kwargs.clear()
        return batch

    monkeypatch.setattr(check, "make_inputs", without_ids)
    fwd = check_with_blame(BERT, "cpu", STAGES).stages["forward"]
    assert (
        fwd.status is Status.ERROR
        and fwd.blame == "harness"
        and fwd.blame_evidence["rule"] == "harness_message"
    )


@pytest.mark.skipif(importlib.util.find_spec("natten") is not None, reason="natten is installed here")
def test_a_missing_optional_package_is_the_environment():
    """dinat needs natten, which is not a dependency."""
    result = check_with_blame(ModelSpec("catalog/dinat", "dinat", ""), "cpu", STAGES)
    load = result.stages["load"]
    assert load.status is Status.ERROR and load.blame == "environment"
    assert load.blame_evidence["package"] == "natten"


def test_missing_package_only_when_it_is_really_missing():
    assert missing_package("No module named 'surely_not_installed_pkg'") == "surely_not_installed_pkg"
    assert (
        missing_package("X requires the natten_fake library but it was not found in your environment")
        == "natten_fake"
    )
    assert missing_package("No module named 'torch'") == ""  # installed: an import bug, not the environment
    assert missing_package("cannot import name 'Foo' from 'transformers'") == ""
    # a module transformers imports only when available, then uses unguarded (SAM-3: torchvision)
    if importlib.util.find_spec("torchvision") is None:
        assert missing_package("name 'torchvision' is not defined") == "torchvision"
    assert missing_package("name 'torch' is not defined") == ""  # installed
    assert missing_package("name 'surely_not_a_module' is not defined") == ""  # a plain NameError


def test_same_way_masks_sizes_but_not_the_failure():
    from contracts.records import StageResult

    row = StageResult(
        "forward",
        "error",
        reason="r",
        error_class="RuntimeError",
        message="The size of tensor a (16) must match the size of tensor b (32) at dimension 1",
    )
    probe = {
        "status": "error",
        "error_class": "RuntimeError",
        "message": "The size of tensor a (768) must match the size of tensor b (1024) at dimension 1",
    }
    assert same_way(row, probe)
    assert not same_way(row, {**probe, "error_class": "ValueError"})
    assert not same_way(
        row, {**probe, "message": "mat1 and mat2 shapes cannot be multiplied (2x16 and 32x8)"}
    )
    assert not same_way(row, {"status": "pass"})


def test_same_way_knows_the_fake_kernels_wording_of_a_matmul_width_mismatch():
    """The fake run meets the meta kernel's words for the failure the real op reports (Granite
    Speech's projector takes 1408 wide encoder states, its default encoder gives 1024)."""
    from contracts.records import StageResult

    row = StageResult(
        "forward",
        "error",
        reason="r",
        error_class="RuntimeError",
        message="mat1 and mat2 shapes cannot be multiplied (150x32 and 1408x32)",
    )
    fake = {
        "status": "error",
        "error_class": "RuntimeError",
        "message": "a and b must have same reduction dim, but got [150, 1024] X [1408, 768].",
    }
    assert same_way(row, fake)
    assert not same_way(
        row, {**fake, "message": "The size of tensor a (7) must match the size of tensor b (8)"}
    )


def test_one_error_worded_by_the_real_kernel_and_by_the_fake_one_is_the_same_way():
    """LW-DETR's default has no projector scales, so its forward concatenates no feature level:
    the CPU kernel says "torch.cat(): expected a non-empty list of Tensors", the FakeTensorMode
    probe of the unshrunk default "cat expects at least one tensor, but received zero!"."""
    row = StageResult(
        "forward",
        "error",
        reason="r",
        error_class="ValueError",
        message="torch.cat(): expected a non-empty list of Tensors",
    )
    probe = {
        "status": "error",
        "error_class": "ValueError",
        "message": "cat expects at least one tensor, but received zero!",
    }
    assert same_way(row, probe)
    assert not same_way(
        row, {**probe, "message": "mat1 and mat2 shapes cannot be multiplied (2x16 and 32x8)"}
    )


def test_a_default_that_concatenates_no_feature_level_is_upstream():
    result = check_with_blame(ModelSpec("catalog/lw_detr", "lw_detr", "LwDetrModel"), "cpu", STAGES)
    fwd = result.stages["forward"]
    assert fwd.status is Status.ERROR and fwd.blame == "upstream"
    assert fwd.blame_evidence["rule"] == "upstream.fake_run"


def test_a_passing_model_has_no_blame():
    result = check_with_blame(BERT, "cpu", STAGES)
    assert all(
        r.status is Status.PASS and r.blame == "" and r.blame_evidence == {} for r in result.stages.values()
    )
    assert torch.is_grad_enabled()


def test_a_config_field_the_config_class_never_defines_is_upstream(monkeypatch):
    """The modeling code reads a config attribute that the config class lacks even with its own
    defaults (qwen3_omni_moe_thinker reads vision_start_token_id in transformers 5.24): upstream."""
    from transformers.models.bert import modeling_bert

    def forward(self, input_ids=None, **kwargs):
        return self.config.planted_field_nobody_defines

    monkeypatch.setattr(modeling_bert.BertModel, "forward", forward)
    fwd = check_with_blame(BERT, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "upstream" and fwd.blame_evidence["rule"] == "upstream.config_attribute"
    assert fwd.blame_evidence["config_attribute"] == {
        "config_class": "BertConfig",
        "attribute": "planted_field_nobody_defines",
        "status": "missing_in_default",
    }


def test_a_config_field_the_harness_removed_is_the_harness(monkeypatch):
    """The same error for a field the default config has (the harness' config lost it): harness."""
    from transformers.models.bert import modeling_bert

    def forward(self, input_ids=None, **kwargs):
        raise AttributeError("'BertConfig' object has no attribute 'hidden_act'")

    monkeypatch.setattr(modeling_bert.BertModel, "forward", forward)
    fwd = check_with_blame(BERT, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "harness" and fwd.blame_evidence["config_attribute"]["status"] == "present_in_default"


def test_a_failing_cpu_reference_of_numerics_is_the_harness_not_the_backend(monkeypatch):
    """The numerics reference emulates the device's rounding, which a plain cpu re-run does not: when
    the harness' reference itself raises, the row is the harness' own (it once blamed the backend)."""
    import harness.stages.numerics as numerics_stage

    def raising(*args, **kwargs):
        raise RuntimeError("the rounding mode could not run an op")

    monkeypatch.setattr(numerics_stage, "compute_reference", raising)
    result = check_with_blame(BERT, "neuron", ["load", "forward", "backward", "numerics"])
    num = result.stages["numerics"]
    assert num.status is Status.ERROR and num.reason.startswith("cpu reference raised: RuntimeError")
    assert num.blame == "harness" and num.blame_evidence["rule"] == "harness_reasons"
    assert result.stages["forward"].status is Status.PASS


def test_an_output_field_the_output_class_never_defines_is_upstream(monkeypatch):
    """The modeling code reads an attribute its output dataclass does not have, whatever the
    inputs (Llama-4's ForConditionalGeneration reads `image_outputs` from its language model's
    `MoeCausalLMOutputWithPast`, transformers 5.24): upstream, with the class's fields as evidence."""
    from transformers.modeling_outputs import BaseModelOutput
    from transformers.models.bert import modeling_bert

    def forward(self, input_ids=None, **kwargs):
        return BaseModelOutput(last_hidden_state=self.embeddings(input_ids)).image_outputs

    monkeypatch.setattr(modeling_bert.BertModel, "forward", forward)
    fwd = check_with_blame(BERT, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "upstream" and fwd.blame_evidence["rule"] == "upstream.output_attribute"
    ev = fwd.blame_evidence["output_attribute"]
    assert ev["output_class"] == "BaseModelOutput" and ev["attribute"] == "image_outputs"
    assert ev["status"] == "not_a_field" and "last_hidden_state" in ev["fields"]


def test_an_output_attribute_of_no_transformers_output_class_stays_the_harness():
    """Only transformers' own output dataclasses are evidence: a class of another name, or a
    field the class has, is no upstream verdict."""
    from harness.blame.probe import probe_output_attribute

    assert probe_output_attribute("'MyHarnessOutput' object has no attribute 'x'")["status"] == "inconclusive"
    assert (
        probe_output_attribute("'BaseModelOutput' object has no attribute 'hidden_states'")["status"]
        == "field"
    )
    assert probe_output_attribute("'BertConfig' object has no attribute 'x'") == {}


def test_layers_of_the_unshrunk_default_that_disagree_in_width_are_upstream():
    """PP-OCRv6's neck takes `layer_list_out_channels` [12, 18, 42, 360] from a backbone whose
    stages give [96, 96, 192, 384]: the unshrunk default fails the same way inside the model (no
    input reaches that conv), whatever the synthesized image: upstream, naming the layer. A
    width mismatch at the model's input (Granite-Speech-5's `input_linear` given the harness'
    unstacked mel features) stays the harness'."""
    spec = ModelSpec("catalog/pp_ocrv6_small_det", "pp_ocrv6_small_det", "PPOCRV6SmallDetForObjectDetection")
    fwd = check_with_blame(spec, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "upstream" and fwd.blame_evidence["rule"] == "upstream.layer_width"
    layer = fwd.blame_evidence["fake_run"]["layer_width"]
    assert layer["layer_class"] == "Conv2d" and layer["weights_take"] == 12 and layer["input_has"] == 384
    # the inputs now feed it the stacked width (a type recipe): without that recipe, the width at
    # its input is the harness' again
    from harness.build.rules import input_recipes

    speech = ModelSpec("catalog/granite_speech5_encoder", "granite_speech5_encoder", "GraniteSpeech5Encoder")
    recipe = input_recipes().by_model_type.pop("granite_speech5_encoder")
    try:
        fwd = check_with_blame(speech, "cpu", STAGES).stages["forward"]
    finally:
        input_recipes().by_model_type["granite_speech5_encoder"] = recipe
    assert fwd.status is Status.ERROR and fwd.blame == "harness"
    assert fwd.blame_evidence["fake_run"]["status"] == "not_run"


def test_a_field_the_default_leaves_unset_and_the_model_needs_is_upstream():
    """Step-3.7 builds a sliding-window mask whatever its layer types, and its default
    `text_config.sliding_window` is None (the harness keeps it): transformers raises "Could not find
    a `sliding_window` argument in the config" for any input. Upstream, with where it is unset."""
    spec = ModelSpec("catalog/step3p7/Step3p7Model", "step3p7", "Step3p7Model")
    fwd = check_with_blame(spec, "cpu", STAGES).stages["forward"]
    assert fwd.status is Status.ERROR and fwd.blame == "upstream"
    assert fwd.blame_evidence["rule"] == "upstream.config_unset"
    assert fwd.blame_evidence["config_unset"]["unset_at"] == "text_config.sliding_window"


def test_a_field_the_default_sets_or_lacks_is_no_unset_verdict():
    """The same message for a config whose default sets the field (the harness' config lost it) or
    never has it (not the config's field) is no evidence against transformers."""
    from transformers import BertConfig, MistralConfig

    from harness.blame.attributes import probe_config_unset

    text = "ValueError: Could not find a `sliding_window` argument in the config, or it is not set"
    assert probe_config_unset(text, MistralConfig)["status"] == "set_in_default"
    assert probe_config_unset(text, BertConfig)["status"] == "not_a_field"
    assert probe_config_unset("ValueError: something else", MistralConfig) == {}


def test_the_input_maker_raising_in_the_probe_too_is_the_harness(monkeypatch):
    """make_inputs notes a processor that fails and goes on, so an exception escaping it is the
    harness' own code; the fake run calls the same code and fails the same way, which is no
    evidence against transformers (MusicGen's ambiguous `get_text_config()` was blamed upstream)."""
    import harness.build.inputs
    import harness.stages.check

    def raising(*args, **kwargs):
        raise ValueError("the input maker broke")

    monkeypatch.setattr(harness.build.inputs, "make_inputs", raising)
    monkeypatch.setattr(harness.stages.check, "make_inputs", raising)
    load = check_with_blame(BERT, "cpu", STAGES).stages["load"]
    assert load.status is Status.ERROR and load.blame == "harness"
    assert load.blame_evidence["fake_run"]["step"] == "inputs"


def test_a_submodule_the_default_config_never_builds_is_upstream(monkeypatch):
    """The forward reads a submodule that no module of its class has when the model is built from
    its own unshrunk config (Blip2ForImageTextRetrieval's Q-Former `intermediate`, built only with
    `use_qformer_text_input`): upstream, with the module class and attribute as evidence."""
    from transformers.models.bert import modeling_bert

    def forward(self, input_ids=None, **kwargs):
        return self.encoder.layer[0].planted_submodule_nobody_builds

    monkeypatch.setattr(modeling_bert.BertModel, "forward", forward)
    fwd = check_with_blame(BERT, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "upstream" and fwd.blame_evidence["rule"] == "upstream.module_attribute"
    assert fwd.blame_evidence["module_attribute"]["module_class"] == "BertLayer"
    assert fwd.blame_evidence["module_attribute"]["status"] == "missing_in_default"


def test_a_submodule_the_default_config_builds_is_the_harness(monkeypatch):
    """The same error for a submodule the default model has (the harness' config lost it): harness."""
    from transformers.models.bert import modeling_bert

    def forward(self, input_ids=None, **kwargs):
        raise AttributeError("'BertLayer' object has no attribute 'attention'")

    monkeypatch.setattr(modeling_bert.BertModel, "forward", forward)
    fwd = check_with_blame(BERT, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "harness" and fwd.blame_evidence["module_attribute"]["status"] == "present_in_default"


def test_a_rope_key_the_default_leaves_out_is_unset():
    """A message naming no field says which one it is about (`field`, a key of `in`): HunYuan-VL's
    text model needs `rope_parameters.mrope_section`, which its default omits; a config that
    sets it (the harness' config lost it) is no evidence against transformers."""
    from transformers import HunYuanVLConfig

    from harness.blame.attributes import probe_config_unset

    text = "ValueError: HunYuanVL expects at least 3 multimodal RoPE axes, got 0."
    found = probe_config_unset(text, HunYuanVLConfig)
    assert found["status"] == "unset_in_default"
    assert found["unset_at"] == "text_config.rope_parameters.mrope_section"
    rope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [8, 8, 8, 8]}
    with_sections = lambda: HunYuanVLConfig(text_config={"head_dim": 64, "rope_parameters": rope})  # noqa: E731
    assert probe_config_unset(text, with_sections)["status"] == "set_in_default"


def test_a_default_that_does_not_build_still_gets_its_message_probes():
    """HunYuan-VL's default does not build (head_dim None) and the harness' shrunk model does; its
    forward then fails on the rope sections its default omits: that message is the default's
    defect, upstream, even though the default build could not be probed further."""
    spec = ModelSpec("catalog/hunyuan_vl/HunYuanVLModel", "hunyuan_vl", "HunYuanVLModel")
    fwd = check_with_blame(spec, "cpu", STAGES).stages["forward"]
    assert fwd.status is Status.ERROR and fwd.blame == "upstream"
    assert fwd.blame_evidence["default_build"]["status"] == "error"
    assert fwd.blame_evidence["rule"] == "upstream.config_unset"


def test_a_config_value_beyond_the_kernel_type_s_range_is_upstream(monkeypatch):
    """The unshrunk config holds a finite number float32 cannot hold, and the failure is that
    conversion: the harness kept the value, no input changes it (planted on BERT)."""
    from transformers.models.bert import modeling_bert

    def forward(self, input_ids=None, **kwargs):
        raise RuntimeError("value cannot be converted to type float without overflow")

    monkeypatch.setattr(modeling_bert.BertModel, "forward", forward)
    spec = ModelSpec(
        "test/bert-huge-eps", "bert", "BertModel", {"model_type": "bert", "layer_norm_eps": 1e300}
    )
    fwd = check_with_blame(spec, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "upstream" and fwd.blame_evidence["rule"] == "upstream.config_overflow"
    assert fwd.blame_evidence["config_overflow"]["fields"] == "layer_norm_eps = 1e+300"
    # the same failure with every config value in range is the harness'
    fwd = check_with_blame(BERT, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "harness" and fwd.blame_evidence["config_overflow"]["status"] == "within_range"


@pytest.mark.shared_data
def test_nemotron_ultra_s_time_step_limit_beyond_float_is_upstream(full_configs_path):
    """NVIDIA-Nemotron-3-Ultra's Hub config clamps the Mamba time step at 1e+308."""
    import json

    if not full_configs_path.exists():
        pytest.skip("needs ../shared/data/hub/full_configs.jsonl")
    configs = {r["id"]: r["config"] for r in map(json.loads, full_configs_path.read_text().splitlines())}
    hub_id = "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"
    spec = ModelSpec(hub_id, "nemotron_h", "NemotronHForCausalLM", configs[hub_id])
    fwd = check_with_blame(spec, "cpu", STAGES).stages["forward"]
    assert fwd.blame == "upstream" and "time_step_limit[1]" in fwd.blame_evidence["config_overflow"]["fields"]
