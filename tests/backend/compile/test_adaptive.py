"""Adaptive eager: results equal plain eager, runs get compiled in the background and reused,
sync points flush, fallbacks are recorded as in eager."""

from __future__ import annotations

import torch

import backend
from backend import adaptive, lowering
from tests.backend.compile.neff_helpers import mlp_step, small_mlp, tiny_transformer, training_step


def test_bert_training_steps_equal_plain_eager_and_reuse_compiled_runs():
    model, batch = tiny_transformer("bert")
    model, batch = model.to("neuron"), {k: v.to("neuron") for k, v in batch.items()}
    eager = [training_step(model, batch) for _ in range(2)]
    with adaptive.adaptive_eager(min_repeats=1) as mode:
        first = training_step(model, batch)
        mode.wait_for_compiles()
        second = training_step(model, batch)
    assert mode.stats.deferred_ops > 100 and mode.stats.compiles_done > 0
    assert mode.stats.runs_compiled > 0  # the second step ran compiled runs
    for got in (first, second):
        torch.testing.assert_close(got[0], eager[0][0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], eager[0][1], rtol=0, atol=0)
        for name, g in got[2].items():
            torch.testing.assert_close(g, eager[0][2][name], rtol=1e-5, atol=1e-7, msg=name)


def test_item_cpu_and_print_are_sync_points(capsys):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("neuron")
    with adaptive.adaptive_eager() as mode:
        y = (x * 2 + 1).relu()
        assert len(mode._run.entries) == 3  # deferred, nothing computed yet
        assert y.sum().item() == 36.0  # .item() flushes first
        assert not mode._run.entries
        z = y.exp()
        torch.testing.assert_close(z.cpu(), (torch.arange(6.0).reshape(2, 3) * 2 + 1).exp())
        w = y - 1
        print(w)
        assert not mode._run.entries
    assert "tensor([[ 0.,  2.,  4.],\n        [ 6.,  8., 10.]]" in capsys.readouterr().out


def test_views_of_pending_results_see_the_data():
    x = torch.randn(4, 4).to("neuron")
    with adaptive.adaptive_eager():
        y = x * 3
        t = y.t()  # a view of a pending result
        s = (t + 1).sum(0)
    torch.testing.assert_close(s.cpu(), (x.cpu() * 3).t().add(1).sum(0), rtol=0, atol=0)


def test_fallbacks_are_recorded_as_in_eager():
    previous = lowering.current_table()
    doc = previous.to_dict()
    for op in [k for k in doc["ops"] if k.startswith("aten.gelu")]:
        del doc["ops"][op]
    lowering.set_table(lowering.parse_table(doc, "test"))
    try:
        model, x = small_mlp().to("neuron"), torch.randn(4, 8).to("neuron")
        with backend.collect_fallbacks() as eager_events:
            want = mlp_step(model, x)
        with backend.collect_fallbacks() as events, adaptive.adaptive_eager():
            got = mlp_step(model, x)
    finally:
        lowering.set_table(previous)
    key = lambda evs: sorted((e.op, e.reason, e.count) for e in evs)  # noqa: E731
    assert key(events) == key(eager_events) and key(events)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)


def test_enable_disable_and_env_switch(monkeypatch):
    monkeypatch.setenv("NEURON_ADAPTIVE_EAGER", "1")
    adaptive.enable_from_env()
    try:
        mode = adaptive.active()
        assert mode is not None
        y = torch.ones(3).to("neuron") + 1
        assert mode.stats.deferred_ops >= 1
        adaptive.synchronize()
        assert not mode._run.entries
    finally:
        adaptive.disable()
    assert adaptive.active() is None
    torch.testing.assert_close(y.cpu(), torch.full((3,), 2.0))
