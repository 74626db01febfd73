"""`torch.compile(backend="neuron")` on the device: equality with eager, partitions, fallbacks,
static shapes, failure handling and the disk cache across processes."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import backend
import backend.compile as neuron_compile
from backend.cache import get_cache
from tests.backend.compile.neff_helpers import mlp_step, small_mlp, tiny_transformer, training_step

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    neuron_compile.clear_compile_fallbacks()
    yield
    torch._dynamo.reset()
    neuron_compile.set_compile_fallback(None)


def _delta(before: dict, name: str) -> float:
    """Growth of a process counter since `before` (counters are process-wide)."""
    return get_cache().counters.to_dict()[name] - before[name]


def _counters() -> dict:
    return get_cache().counters.to_dict()


def _on_device(batch):
    return {k: v.to("neuron") for k, v in batch.items()}


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_tiny_transformer_compiles_and_matches_eager(kind):
    model, batch = tiny_transformer(kind)
    model, batch = model.to("neuron"), _on_device(batch)
    eager_loss, eager_logits, eager_grads = training_step(model, batch)
    compiled = torch.compile(model, backend="neuron")
    before = _counters()
    with backend.collect_fallbacks() as events:
        loss, logits, grads = training_step(compiled, batch)
    assert _delta(before, "compiles") >= 2  # at least a forward and a backward partition
    assert events == []  # every op of the graphs has a lowering: nothing ran on the host
    torch.testing.assert_close(loss, eager_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logits, eager_logits, rtol=1e-5, atol=1e-5)
    assert grads.keys() == eager_grads.keys() and len(grads) > 10
    for name in grads:
        torch.testing.assert_close(grads[name], eager_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_unsupported_op_gives_partitions_and_eager_identical_fallbacks(table_without_gelu):
    model = small_mlp().to("neuron")
    x = torch.randn(4, 8).to("neuron")
    with backend.collect_fallbacks() as eager_events:
        eager_out, eager_grads = mlp_step(model, x)
    before = _counters()
    with backend.collect_fallbacks() as events:
        out, grads = mlp_step(torch.compile(model, backend="neuron"), x)
    ops = lambda evs: sorted({(e.op, e.reason) for e in evs})  # noqa: E731
    assert ops(eager_events) and ops(events) == ops(eager_events)
    assert all(op.startswith("aten.gelu") for op, _ in ops(events))
    assert _delta(before, "compiles") >= 3  # linear before, linear after gelu, backward parts
    torch.testing.assert_close(out, eager_out, rtol=0, atol=0)
    for g, eg in zip(grads, eager_grads):
        torch.testing.assert_close(g, eg, rtol=1e-6, atol=1e-7)


def test_partition_count_and_declined_reason_from_the_table(table_without_gelu):
    from torch.fx.experimental.proxy_tensor import make_fx

    model = small_mlp()
    params = dict(model.named_parameters())

    def forward(x, *weights):
        return torch.func.functional_call(model, dict(zip(params, weights)), (x,))

    gm = make_fx(forward, tracing_mode="fake")(torch.randn(4, 8), *params.values())
    out = neuron_compile.compile_graph(gm, "forward")
    assert len(out.meta["neuron_partitions"]) == 2
    assert set(out.meta["neuron_declined"].values()) == {"no-lowering"}


def test_dynamic_true_is_rejected_with_a_clear_error():
    model = small_mlp().to("neuron")
    compiled = torch.compile(model, backend="neuron", dynamic=True)
    with pytest.raises(Exception, match="static shapes") as info:
        compiled(torch.randn(4, 8).to("neuron"))
    assert "dynamic" in str(info.value)


def test_a_new_shape_is_a_new_counted_compile():
    compiled = torch.compile(small_mlp().to("neuron"), backend="neuron")
    compiled(torch.randn(4, 8).to("neuron"))
    first = _counters()
    compiled(torch.randn(6, 8).to("neuron"))
    second = _counters()
    compiled(torch.randn(6, 8).to("neuron"))
    assert _delta(first, "compiles") > 0 and _delta(second, "compiles") == 0


def test_compile_failure_raises_by_default(monkeypatch):
    monkeypatch.setenv("NEURON_COMPILE_INJECT_FAILURE", "1")
    compiled = torch.compile(small_mlp().to("neuron"), backend="neuron")
    before = _counters()
    with pytest.raises(Exception, match="neuron compile of the forward graph failed"):
        compiled(torch.randn(4, 8).to("neuron"))
    assert _delta(before, "compile_failures") >= 1 and _delta(before, "compiles") == 0


@pytest.mark.parametrize("switch", ["env", "api"])
def test_compile_failure_falls_back_to_eager_when_switched(monkeypatch, switch):
    monkeypatch.setenv("NEURON_COMPILE_INJECT_FAILURE", "1")
    if switch == "env":
        monkeypatch.setenv("NEURON_COMPILE_FALLBACK", "eager")
    else:
        neuron_compile.set_compile_fallback("eager")
    model = small_mlp().to("neuron")
    x = torch.randn(4, 8).to("neuron")
    eager_out, eager_grads = mlp_step(model, x)
    before = _counters()
    with pytest.warns(UserWarning, match="runs eagerly after a compile failure"):
        out, grads = mlp_step(torch.compile(model, backend="neuron"), x)
    torch.testing.assert_close(out, eager_out, rtol=0, atol=0)
    recorded = neuron_compile.compile_fallbacks()
    assert {e.graph for e in recorded} == {"forward", "backward"}
    assert all(e.error_class == "CompileError" for e in recorded)
    assert _delta(before, "eager_fallbacks") == 2 and _delta(before, "compiles") == 0


def test_second_process_hits_the_disk_cache_with_zero_compiles(neff_cache_dir):
    before = _counters()
    mlp_step(torch.compile(small_mlp().to("neuron"), backend="neuron"), torch.ones(4, 8).to("neuron"))
    compiled_here = _delta(before, "compiles")
    assert compiled_here >= 2
    env = {**os.environ, "NEURON_CACHE_DIR": str(neff_cache_dir)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(HERE / "neff_helpers.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    counters = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counters["compiles"] == 0
    assert counters["hits_disk"] == compiled_here


def test_neuron_is_a_registered_dynamo_backend():
    from torch._dynamo.backends.registry import lookup_backend

    neuron_compile.register_dynamo_backend()
    assert "neuron" in torch._dynamo.list_backends()
    assert lookup_backend("neuron") is neuron_compile.neuron_backend


def test_training_with_optimizer_updates_matches_eager():
    """Rounded weights are reused only while a parameter is unchanged: SGD updates are seen."""
    x = torch.randn(4, 8).to("neuron")

    def train(model, steps=3):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        outs = []
        for _ in range(steps):
            out = model(x)
            out.square().mean().backward()
            opt.step()
            opt.zero_grad()
            outs.append(out.detach().cpu())
        return outs

    eager = train(small_mlp().to("neuron"))
    model = small_mlp().to("neuron")
    compiled = train(torch.compile(model, backend="neuron"))
    assert not torch.equal(compiled[0], compiled[-1])  # the weights did change
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("index", ["gather", "scatter"])
def test_indexing_that_skips_dims_compiles_and_matches_eager(index):
    """`x[:, idx]` is aten.index with indices [None, idx] (Tensor?[]): the compiled program passes
    the None through, as the FX executable does (before: "Expected Tensor but got None" on the
    native path, in every model that upsamples bilinearly or gathers along a later dim)."""

    class Skips(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 6))

        def forward(self, x, idx):
            h = x * self.w
            if index == "gather":
                return h[:, idx].sum()
            h = h.clone()
            h[:, idx] = h[:, idx] * 3.0  # index_put with indices [None, idx]
            return (h * h).sum()

    torch.manual_seed(0)
    x, idx = torch.randn(4, 6), torch.tensor([0, 2, 5])
    model = Skips().to("neuron")
    eager = model(x.to("neuron"), idx.to("neuron"))
    eager.backward()
    grad, model.w.grad = model.w.grad.to("cpu"), None
    compiled = torch.compile(model, backend="neuron")
    out = compiled(x.to("neuron"), idx.to("neuron"))
    out.backward()
    torch.testing.assert_close(out.to("cpu"), eager.to("cpu"))
    torch.testing.assert_close(model.w.grad.to("cpu"), grad)


def test_a_view_functionalization_restrides_in_place_compiles_and_matches_eager():
    """`adaptive_avg_pool1d` of a transposed tensor: functionalization re-strides its
    FunctionalTensor wrappers in place (`as_strided_` under no_dispatch), which have no device
    payload; the device leaves in-place view ops to PyTorch's metadata-only kernel (before: "tensor
    has no device payload" in the compile stage of the Swin family, DonutSwin, FocalNet, MaskFormer)."""

    class Pool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.pool = torch.nn.Linear(8, 8), torch.nn.AdaptiveAvgPool1d(1)

        def forward(self, x):
            return self.pool(self.lin(x).transpose(1, 2)).flatten(1)

    torch.manual_seed(0)
    model, x = Pool().to("neuron"), torch.randn(2, 5, 8).to("neuron")
    eager = model(x)
    eager.sum().backward()
    grad, model.lin.weight.grad = model.lin.weight.grad.to("cpu"), None
    out = torch.compile(model, backend="neuron")(x)
    out.sum().backward()
    torch.testing.assert_close(out.to("cpu"), eager.to("cpu"))
    torch.testing.assert_close(model.lin.weight.grad.to("cpu"), grad)


def test_in_place_view_ops_change_the_device_tensors_metadata_as_on_cpu():
    x = torch.arange(20.0).reshape(4, 5)
    n = x.to("neuron")
    for op in (
        lambda t: t.as_strided_((3, 2), (1, 3), 2),
        lambda t: t.t_(),
        lambda t: t.unsqueeze_(0),
        lambda t: t.transpose_(0, 2),
    ):
        op(x), op(n)
        assert n.shape == x.shape and n.stride() == x.stride() and n.storage_offset() == x.storage_offset()
        assert torch.equal(n.to("cpu"), x)


def _wrapped(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class _MaskAssign(torch.nn.Module):
    """A boolean-mask assignment of values that need a gradient: the backward is `grad[mask]`
    (aten.nonzero), which AOTAutograd cannot trace; behind two wrapper frames, as transformers'
    decorators put a model's forward."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.lin = torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8)

    @_wrapped
    @_wrapped
    def forward(self, ids, mask, img):
        x = self.emb(ids)
        x[mask.bool()] = img.view(-1, 8)
        return self.lin(x).sum()


def test_a_graph_aot_autograd_cannot_trace_is_traced_once_however_many_frames_hand_it_over(monkeypatch):
    """Dynamo answers the trace failure with a graph break and hands the same graph over again for
    each enclosing frame (Kosmos-2: 15 failed traces of ~5 s); the backend fails it again at once,
    so Dynamo decides the same and the results are eager's."""
    from torch._dynamo.backends import common

    traced, calls = [], []
    real_aot = common.aot_autograd

    def counting_aot(**kw):
        inner = real_aot(**kw)

        def call(gm, inputs, **k):
            traced.append(len(gm.graph.nodes))
            return inner(gm, inputs, **k)

        return call

    def spy(gm, inputs, **k):
        calls.append(len(gm.graph.nodes))
        return neuron_compile.neuron_backend(gm, inputs, **k)

    monkeypatch.setattr(common, "aot_autograd", counting_aot)
    neuron_compile._doomed.clear()
    torch.manual_seed(0)
    model = _MaskAssign().to("neuron")
    ids, mask = torch.randint(0, 10, (2, 6)).to("neuron"), torch.zeros(2, 6, dtype=torch.long)
    mask[:, 1:3] = 1
    img = torch.randn(2, 2, 8).to("neuron").requires_grad_()
    expected = model(ids, mask.to("neuron"), img)
    expected.backward()
    want, img.grad = img.grad.to("cpu"), None
    out = torch.compile(model, backend=spy)(ids, mask.to("neuron"), img)
    out.backward()
    torch.testing.assert_close(out.to("cpu"), expected.to("cpu"))
    torch.testing.assert_close(img.grad.to("cpu"), want)
    assert len(calls) > len(traced), (calls, traced)  # the same graph came again and was not re-traced
    assert len(set(traced)) == len(traced), traced  # no graph was traced twice
