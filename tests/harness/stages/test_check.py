"""check_model: one model, one backend, every stage ends in a Status; the CLI prints it."""

from __future__ import annotations

import json

import pytest
import yaml

from contracts.backends import get_backend
from contracts.errors import classify, normalize
from contracts.records import ModelSpec
from contracts.status import MODEL_STAGES, Status
from harness.stages.check import check_model

BERT = ModelSpec("catalog/bert/BertForMaskedLM", "bert", "BertForMaskedLM")
NO_COMPILE = [s for s in MODEL_STAGES if s != "compile"]


def neuron():
    return get_backend("neuron")  # the bundled simulator: it must always resolve


def test_tiny_bert_on_neuron_passes_every_eager_stage():
    neuron()
    result = check_model(BERT, backend="neuron", stages=NO_COMPILE)
    statuses = {name: r.status for name, r in result.stages.items()}
    assert statuses == {s: Status.PASS for s in NO_COMPILE}, {n: r.reason for n, r in result.stages.items()}
    assert result.parameters > 0 and result.fallback_count == 0
    assert result.stages["backward"].metrics["loss_source"] == "labels"
    assert result.stages["numerics"].metrics["reference"] == "cpu_float64"


@pytest.mark.slow
def test_tiny_bert_on_neuron_compiles():
    assert neuron().compile_backend == "neuron"
    result = check_model(BERT, backend="neuron", stages=["compile"])
    r = result.stages["compile"]
    assert r.status == Status.PASS, r.reason
    assert result.graphs >= 1


def test_an_op_removed_from_the_lowering_table_is_recorded_as_fallback(tmp_path, monkeypatch):
    neuron()
    from backend import lowering

    table = lowering.load_table().to_dict()  # the bundled table, in its file format
    assert "aten.gelu" in table["ops"]
    del table["ops"]["aten.gelu"]
    path = tmp_path / "reduced.yaml"
    path.write_text(yaml.safe_dump(table))
    monkeypatch.setenv(lowering.ENV_VAR, str(path))
    lowering.set_table(None)  # reload from the environment
    try:
        result = check_model(
            ModelSpec("bert", "bert", "BertModel"), backend="neuron", stages=["forward", "on_device"]
        )
    finally:
        monkeypatch.delenv(lowering.ENV_VAR)
        lowering.set_table(None)
    assert result.stages["forward"].status == Status.PASS  # it ran, through the CPU
    assert "aten.gelu.default" in result.fallback_ops
    assert result.fallback_count >= 1
    on_device = result.stages["on_device"]
    assert on_device.status == Status.FAIL and "aten.gelu.default" in on_device.reason


def test_cpu_backend_reports_what_it_cannot_as_not_attempted():
    result = check_model(BERT, backend="cpu", stages=NO_COMPILE)
    assert result.stages["forward"].status == Status.PASS
    assert result.stages["numerics"].status == Status.PASS
    od = result.stages["on_device"]
    assert od.status == Status.NOT_ATTEMPTED and "fallback" in od.reason


def test_prerequisites_run_and_failures_cascade_as_not_attempted():
    result = check_model(ModelSpec("x", "bert", "NoSuchModelForAnything"), backend="cpu", stages=["numerics"])
    assert list(result.stages) == ["load", "forward", "numerics"]
    assert result.stages["load"].status == Status.ERROR
    assert result.stages["load"].error_class == "UnknownArchitecture"
    for s in ("forward", "numerics"):
        assert result.stages[s].status == Status.NOT_ATTEMPTED and result.stages[s].reason


def test_unknown_model_type_and_backend_are_outcomes_not_exceptions():
    r = check_model(ModelSpec("x", "not_a_model_type"), backend="cpu", stages=["load"])
    assert r.stages["load"].status == Status.ERROR
    r = check_model(BERT, backend="no_such_module:dev", stages=["load", "forward"])
    assert r.stages["load"].status == Status.ERROR and r.stages["forward"].status == Status.NOT_ATTEMPTED


def test_unknown_stage_is_a_usage_error():
    with pytest.raises(ValueError, match="unknown stage"):
        check_model(BERT, backend="cpu", stages=["fly"])


def test_error_classification():
    import torch

    assert classify(torch.OutOfMemoryError("CUDA out of memory")).status == Status.OOM
    assert classify(TimeoutError("slow")).status == Status.TIMEOUT
    e = classify(RuntimeError("bad tensor at 0x7f3a2b1c in /tmp/pytest-9/x.py: aten::addmm failed"))
    assert e.status == Status.ERROR and e.error_class == "RuntimeError"
    assert "0x7f3a" not in e.message and "/tmp/pytest" not in e.message
    assert e.failing_op == "aten.addmm"
    assert normalize("a\n b") == "a"
    # Dynamo's wrapper announces the error on the next line: the reason must name it
    wrapped = (
        "backend='neuron' raised:\nRuntimeError: Cannot set version_counter for inference tensor\n\n"
        "While executing"
    )
    assert (
        normalize(wrapped)
        == "backend='neuron' raised: RuntimeError: Cannot set version_counter for inference tensor"
    )
    assert normalize("only a header:") == "only a header:"

    class WithOp(RuntimeError):
        op = "aten.nonzero.default"

    assert classify(WithOp("x")).failing_op == "aten.nonzero.default"


def test_cli_json_for_a_model_type(capsys):
    from harness.cli import main

    code = main(["check", "bert", "--backend", "cpu", "--stages", "load", "forward", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["stages"]["forward"]["status"] == "pass" and out["model_type"] == "bert"
    assert out["architecture"] == "BertModel" and out["parameters"] > 0


def test_cli_table_for_a_config_json(tmp_path, capsys):
    from harness.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 12}))
    code = main(["check", str(path), "--backend", "cpu", "--stages", "load", "forward", "backward"])
    text = capsys.readouterr().out
    assert code == 0 and "GPT2LMHeadModel" in text
    assert [line.split()[1] for line in text.splitlines()[2:5]] == ["pass", "pass", "pass"]


def test_cli_resolves_a_hub_id_from_a_snapshot(tmp_path, capsys):
    from harness.cli import main

    snap = tmp_path / "snap.jsonl"
    rows = [
        {
            "id": "org/tiny-llama",
            "downloads": 5,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "config": {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "num_attention_heads": 8,
                "num_key_value_heads": 2,
            },
            "config_level": "full",
        },
        {"id": "org/custom", "config": {"model_type": "custom_thing", "auto_map": {"AutoModel": "m.M"}}},
    ]
    snap.write_text("\n".join(json.dumps(r) for r in rows))
    code = main(
        ["check", "org/tiny-llama", "--snapshot", str(snap), "--backend", "cpu", "--stages", "load", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["model_id"] == "org/tiny-llama" and out["architecture"] == "LlamaForCausalLM"
    code = main(["check", "org/custom", "--snapshot", str(snap), "--backend", "cpu", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and "error" in out
    code = main(["check", "org/absent", "--backend", "cpu"])
    assert code == 2 and "--snapshot" in capsys.readouterr().err


def test_failing_op_found_in_the_traceback():
    import torch

    def fallback(op, *args):  # stands in for a device's dispatch code
        raise RuntimeError("kernel not implemented for 'Int'")

    try:
        fallback(torch.ops.aten.histc.default, 1)
    except RuntimeError as exc:
        assert classify(exc).failing_op == "aten.histc.default"


def test_a_model_returning_integer_codes_only_passes_forward_and_has_no_backward():
    """WavTokenizer's encoder returns its codebook ids only: that is its result (forward passes,
    on the device), and with nothing to differentiate backward is not applicable, not failed."""
    spec = ModelSpec("catalog/wavtokenizer_encoder", "wavtokenizer_encoder", "WavTokenizerEncoderModel")
    result = check_model(spec, backend="cpu", stages=["load", "forward", "backward"])
    fwd, bwd = result.stages["forward"], result.stages["backward"]
    assert fwd.status is Status.PASS and fwd.metrics["integer_outputs"] >= 1 and fwd.metrics["outputs"] == 0
    assert bwd.status is Status.SKIPPED and "integer outputs only" in bwd.reason
