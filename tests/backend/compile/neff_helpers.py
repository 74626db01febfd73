"""Helpers shared by the compile tests (host graphs and a rule-based lowering table)."""

from __future__ import annotations

import torch


class RuleTable:
    """A lowering table for host-only graph tests: everything native except `missing` ops."""

    def __init__(self, missing=("aten.cumsum.default",), version="test-table-1"):
        self.missing = set(missing)
        self.version = version

    def supports(self, op, dtypes):
        if op in self.missing:
            return False, "no-lowering"
        if any(d == torch.float64 for d in dtypes):
            return False, "dtype"
        return True, None


def mlp_with_cumsum(x, w, b):
    y = torch.nn.functional.linear(x, w, b).relu()
    z = torch.cumsum(y, 1)
    return (z * 2).sum(), y.t()


def tiny_transformer(kind: str):
    """Tiny BERT-MLM / Llama-CLM from their transformers configs (hidden 64, 2 layers), and a batch."""
    import transformers

    torch.manual_seed(0)
    if kind == "bert":
        cfg = transformers.BertConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            vocab_size=512,
            max_position_embeddings=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        model = transformers.BertForMaskedLM(cfg)
    else:
        cfg = transformers.LlamaConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            vocab_size=512,
            max_position_embeddings=64,
        )
        model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, 512, (2, 16))
    return model, {"input_ids": ids, "labels": ids}


def training_step(model, batch):
    """Forward + backward; returns loss, logits and gradients on the host, and clears grads."""
    out = model(**batch)
    out.loss.backward()
    grads = {
        n.removeprefix("_orig_mod."): p.grad.cpu().clone()
        for n, p in model.named_parameters()
        if p.grad is not None
    }
    for p in model.parameters():
        p.grad = None
    return out.loss.detach().cpu(), out.logits.detach().cpu(), grads


def small_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def mlp_step(model, x):
    out = model(x)
    out.square().mean().backward()
    grads = [p.grad.cpu().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    return out.detach().cpu(), grads


if __name__ == "__main__":  # a second process: compile the small MLP, print the cache counters
    import json

    import backend  # noqa: F401
    from backend.cache import get_cache

    model = small_mlp().to("neuron")
    mlp_step(torch.compile(model, backend="neuron"), torch.ones(4, 8).to("neuron"))
    print(json.dumps(get_cache().counters.to_dict()))
