"""The gate of one call's outputs: what a kernel is free to choose (the order of an unsorted topk,
which of equal elements an index names, the integer width of an index) is not a mismatch; a wrong
value still is."""

from __future__ import annotations

import torch

from harness.rootcause import calls

TOPK = torch.ops.aten.topk.default
SORT = torch.ops.aten.sort.default


def _judge(func, args, device_out):
    ref = calls.recompute(func, args, {}, None)
    produced = calls.outputs(func, device_out, args, {})
    dim = calls.unordered_dim(func, args, {})
    if dim is not None:
        produced = calls.in_value_order(produced, dim)
        ref = calls.ReferenceCall(calls.in_value_order(ref.eager, dim), calls.in_value_order(ref.truth, dim))
    return calls.judge(produced, ref, False, ties=calls.tie_outputs(func))


def test_an_unsorted_topk_in_another_order_passes_and_a_wrong_value_does_not():
    x = torch.randn(5, 9, generator=torch.Generator().manual_seed(0))
    args = (x, 4, -1, True, False)
    assert calls.unordered_dim(TOPK, args, {}) == -1
    assert calls.unordered_dim(TOPK, (x, 4), {}) is None  # sorted by default: order is defined
    values, indices = TOPK(*args)
    assert _judge(TOPK, args, (values.flip(-1), indices.flip(-1))) is None
    wrong = values.flip(-1).clone()
    wrong[0, 0] += 1.0
    assert _judge(TOPK, args, (wrong, indices.flip(-1))) is not None


def test_sorted_output_in_another_order_is_a_mismatch():
    x = torch.randn(5, 9, generator=torch.Generator().manual_seed(1))
    args = (x, 4, -1, True, True)
    values, indices = TOPK(*args)
    assert _judge(TOPK, args, (values.flip(-1), indices.flip(-1))) is not None


def test_integer_sort_indices_of_ties_in_another_width_pass_and_wrong_values_do_not():
    x = torch.tensor([3, 1, 3, 0, 1, 3], dtype=torch.int32)
    values, indices = SORT(x)
    ties = torch.tensor([3, 4, 1, 5, 2, 0])  # equal elements named in another order
    assert torch.equal(x[ties], values) and not torch.equal(ties, indices)
    assert _judge(SORT, (x,), (values, ties.to(torch.int32))) is None
    assert _judge(SORT, (x,), (values.flip(0), indices)) is not None
