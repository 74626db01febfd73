"""Fixtures of the registry tests: tiny transformers models and a small recorded registry."""

from __future__ import annotations

import pytest
import torch


def tiny_bert():
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(
        BertConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            vocab_size=97,
            max_position_embeddings=32,
        )
    )


def bert_inputs(model, seq: int = 8):
    ids = torch.randint(0, model.config.vocab_size, (2, seq))
    return {"input_ids": ids, "labels": ids}


@pytest.fixture(scope="session")
def bert_outcome():
    from registry.recorder import record_workload

    return record_workload(tiny_bert, bert_inputs, model_id="tiny/bert", weight=10.0, prefer_fake=False)


@pytest.fixture(scope="session")
def bert_registry(bert_outcome):
    from registry.store import Registry

    return Registry(bert_outcome.entries)
