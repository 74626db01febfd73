"""Eager overhead of the simulated `neuron` device: neuron-eager time / CPU-eager time.

One training step (forward + backward) of a tiny BERT-MLM and a tiny Llama-CLM (hidden 64,
2 layers, 4 heads, vocab 512, batch 2 x sequence 32, random weights from the transformers
configs), one thread. CPU and neuron steps alternate (so machine noise hits both alike); the
figure is the median over repeats. Target: ratio <= 2.

    python benchmarks/eager_overhead.py [--repeats 30] [--json]

``--json`` prints one object; keys ending in ``_ratio`` are the (wall-clock) ratios;
``*_ratio_process_time`` are the same ratios in process CPU time, which a busy machine distorts less.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import torch

HIDDEN, LAYERS, HEADS, VOCAB, BATCH, SEQ = 64, 2, 4, 512, 2, 32


def tiny_models() -> dict[str, torch.nn.Module]:
    from transformers import BertConfig, BertForMaskedLM, LlamaConfig, LlamaForCausalLM

    common = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=4 * HIDDEN,
        max_position_embeddings=2 * SEQ,
    )
    torch.manual_seed(0)
    bert = BertForMaskedLM(BertConfig(**common))
    llama = LlamaForCausalLM(LlamaConfig(num_key_value_heads=HEADS, **common))
    return {"bert_mlm": bert, "llama_clm": llama}


def step(model: torch.nn.Module, ids: torch.Tensor, device: str) -> tuple[float, float]:
    """One forward+backward; returns (wall seconds, process CPU seconds), batch transfer included."""
    model.zero_grad(set_to_none=True)
    start, start_cpu = time.perf_counter(), time.process_time()
    x = ids.to(device)
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    loss.item()  # the step is done when its result is on the host
    return time.perf_counter() - start, time.process_time() - start_cpu


def measure(repeats: int, warmup: int = 3) -> dict[str, float]:
    import backend  # noqa: F401 - registers the device

    torch.set_num_threads(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    out: dict[str, float] = {}
    for name, cpu_model in tiny_models().items():
        cpu_model.train()
        dev_model = copy.deepcopy(cpu_model).to("neuron")
        for _ in range(warmup):
            step(cpu_model, ids, "cpu")
            step(dev_model, ids, "neuron")
        cpu_t, dev_t = [], []
        for _ in range(repeats):
            cpu_t.append(step(cpu_model, ids, "cpu"))
            dev_t.append(step(dev_model, ids, "neuron"))
        cpu_ms, dev_ms = (statistics.median(t[0] for t in ts) * 1e3 for ts in (cpu_t, dev_t))
        out[f"{name}_cpu_ms"] = round(cpu_ms, 3)
        out[f"{name}_neuron_ms"] = round(dev_ms, 3)
        out[f"{name}_ratio"] = round(dev_ms / cpu_ms, 3)
        # CPU time of the process (all threads): less sensitive to a loaded machine than wall time
        cpu_cpu, dev_cpu = (statistics.median(t[1] for t in ts) * 1e3 for ts in (cpu_t, dev_t))
        out[f"{name}_ratio_process_time"] = round(dev_cpu / cpu_cpu, 3) if cpu_cpu > 0 else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="measured steps per device (median)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.repeats)
    result.update(repeats=args.repeats, threads=1, target_max=2.0)
    import backend

    result["precision"] = backend.precision()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
