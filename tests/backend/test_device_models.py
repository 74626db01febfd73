"""A tiny BERT and a tiny Llama (random weights from their transformers configs) train one step on
`neuron` with loss and gradients within tolerance of CPU, natively (no fallback) by default."""

from __future__ import annotations

import copy

import pytest
import torch

import backend

HIDDEN, LAYERS, HEADS, VOCAB = 64, 2, 4, 512


def _bert():
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(
        BertConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=4 * HIDDEN,
            max_position_embeddings=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    )


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            intermediate_size=4 * HIDDEN,
            max_position_embeddings=64,
        )
    )


def _step(model, ids, device):
    x = ids.to(device)
    out = model(input_ids=x, attention_mask=torch.ones_like(x), labels=x)
    out.loss.backward()
    return out.loss.detach().cpu(), {n: p.grad.detach().cpu() for n, p in model.named_parameters()}


# tolerances: default precision rounds matmul inputs to bf16 (relative error ~2^-8 per input)
TOL = {
    "bf16": dict(loss=2e-3, grad_rtol=5e-2, grad_atol=2e-3),
    "exact": dict(loss=1e-5, grad_rtol=1e-4, grad_atol=1e-5),
}


@pytest.mark.parametrize("build", [_bert, _llama], ids=["bert", "llama"])
@pytest.mark.parametrize("mode", ["bf16", "exact"])
def test_training_step_matches_cpu(build, mode):
    previous = backend.set_precision(mode)
    try:
        torch.manual_seed(0)
        cpu_model = build()
        dev_model = copy.deepcopy(cpu_model).to("neuron")
        ids = torch.randint(0, VOCAB, (2, 32), generator=torch.Generator().manual_seed(1))
        loss_cpu, grads_cpu = _step(cpu_model, ids, "cpu")
        with backend.collect_fallbacks() as events:
            loss_dev, grads_dev = _step(dev_model, ids, "neuron")
    finally:
        backend.set_precision(previous)
    tol = TOL[mode]
    assert events == [], [(e.op, e.reason, e.frame) for e in events]
    assert abs(loss_dev.item() - loss_cpu.item()) <= tol["loss"] * abs(loss_cpu.item())
    assert grads_dev.keys() == grads_cpu.keys()
    for name, g in grads_cpu.items():
        torch.testing.assert_close(grads_dev[name], g, rtol=tol["grad_rtol"], atol=tol["grad_atol"], msg=name)
    assert all(p.device.type == "neuron" for p in dev_model.parameters())
