"""The architecture signature (harness.build.signature): identical shrunk architectures share it."""

from __future__ import annotations

from contracts.records import ModelSpec
from harness.build.signature import architecture_signature


def test_architecture_signature_dedups_identical_architectures():
    base = {
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
    }
    a = ModelSpec("org/a", "llama", "LlamaForCausalLM", dict(base, hidden_size=4096))
    b = ModelSpec(
        "org/b-instruct", "llama", "LlamaForCausalLM", dict(base, hidden_size=4096, _name_or_path="b")
    )
    c = ModelSpec("org/c", "llama", "LlamaForCausalLM", dict(base, num_key_value_heads=4))  # ratio 8
    d = ModelSpec("org/a", "llama", "LlamaForSequenceClassification", dict(base, hidden_size=4096))
    sa, sb, sc, sd = (architecture_signature(s) for s in (a, b, c, d))
    assert sa == sb and sa != sc and sa != sd
