"""Boundary values: every constrained input also takes its edges (index 0, the last row, the padding
index, the largest class id, all-true and all-false masks), and a bug that lives only there is caught."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from contracts.backends import BackendDefaults, get_backend
from registry import boundaries
from registry.constraints import infer_constraints
from registry.encoding import encode_args, signature
from registry.replay import CaseSpec, build_args, materialize, replay

CPU = get_backend("cpu")


def _spec(op, args, kwargs=None):
    a, k = encode_args(args, kwargs or {})
    return CaseSpec(op, signature(a, k), {})


def _variant_inputs(spec):
    sig = json.loads(spec.signature)
    cons = infer_constraints(spec.op, sig["a"], sig["k"])
    out = {}
    for name, vc in boundaries.variants(sig["a"], sig["k"], cons):
        built = build_args(sig["a"], sig["k"], vc, torch.Generator().manual_seed(0))
        out[name] = materialize(built[0], torch.device("cpu"))
    return out


def test_embedding_indices_take_row_zero_the_last_row_and_the_padding_index():
    spec = _spec("aten.embedding.default", (torch.zeros(30522, 4), torch.zeros(2, 8, dtype=torch.long), 3))
    ((name, (weight, idx, pad)),) = _variant_inputs(spec).items()
    assert name == boundaries.BASE and pad == 3
    values = set(idx.flatten().tolist())
    assert {
        0,
        30521,
        3,
    } <= values and idx.max() < 30522  # random otherwise: 16 random indices never hit all three


def test_nll_loss_targets_take_the_largest_class_and_the_ignore_index():
    spec = _spec(
        "aten.nll_loss_forward.default", (torch.zeros(4, 10), torch.zeros(4, dtype=torch.long), None, 1, -100)
    )
    ((_, (_, target, *_)),) = _variant_inputs(spec).items()
    assert {9, 0, -100} <= set(target.tolist())


def test_values_that_do_not_fit_go_into_extra_variants():
    # one target of a 2-row batch per class slot: [last, first] in the base, the ignore index in a variant
    spec = _spec(
        "aten.nll_loss_forward.default", (torch.zeros(2, 5), torch.zeros(2, dtype=torch.long), None, 1, -100)
    )
    inputs = _variant_inputs(spec)
    seen = {v for args in inputs.values() for v in args[1].tolist()}
    assert len(inputs) == 2 and {4, 0, -100} <= seen


def test_unique_indices_stay_unique_with_the_edges_planted():
    spec = _spec(
        "aten.scatter.src", (torch.zeros(6, 5), 0, torch.zeros(4, 5, dtype=torch.long), torch.zeros(4, 5))
    )
    ((_, (_, _, index, _)),) = _variant_inputs(spec).items()
    for col in index.t():
        assert col.unique().numel() == 4
    assert {0, 5} <= set(index.flatten().tolist())


def test_masks_take_all_true_and_all_false():
    spec = _spec("aten.masked_fill.Scalar", (torch.zeros(3, 4), torch.zeros(3, 4, dtype=torch.bool), -1.0))
    inputs = _variant_inputs(spec)
    assert set(inputs) == {boundaries.BASE, "a.1=all-true", "a.1=all-false"}
    assert bool(inputs["a.1=all-true"][1].all()) and not bool(inputs["a.1=all-false"][1].any())


def test_plant_keeps_present_values_and_fills_from_both_ends():
    t = torch.tensor([5, 5, 5, 5])
    assert boundaries.plant(t, [9, 0, 5]).tolist() == [5, 5, 0, 9]  # the 5 at position 0 stays
    assert boundaries.plant(torch.tensor([7]), [9, 0]).tolist() == [9]


# ---------------------------------------------------------------- a bug only on the boundary


class _LastRowBug(TorchDispatchMode):
    """The device reads the last embedding row 10% wrong (an off-by-one in a table's tail)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.embedding.default:
            weight, idx = args[0], args[1]
            out = torch.where((idx == weight.shape[0] - 1).unsqueeze(-1), out * 1.1, out)
        return out


class _BuggyCPU(BackendDefaults):
    """A backend on the CPU whose embedding has the last-row bug while an op runs."""

    name = device_type = "cpu"
    reports_fallbacks = False
    device = torch.device("cpu")

    @contextlib.contextmanager
    def track_fallbacks(self):
        with _LastRowBug():
            yield []


@pytest.mark.parametrize("rows,n", [(30522, 16), (97, 2), (50, 1)])
def test_a_bug_on_the_last_embedding_row_is_caught(rows, n):
    spec = _spec("aten.embedding.default", (torch.zeros(rows, 8), torch.zeros(n, dtype=torch.long)))
    assert replay(spec, CPU).status.value == "pass"
    bad = replay(spec, _BuggyCPU())
    assert bad.status.value == "fail" and "mismatch" in bad.reason


def test_a_mask_bug_only_for_all_false_masks_names_the_variant():
    class AllFalseBug(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.masked_fill.Scalar and not bool(args[1].any()):
                out = out + 1.0
            return out

    class Buggy(_BuggyCPU):
        @contextlib.contextmanager
        def track_fallbacks(self):
            with AllFalseBug():
                yield []

    spec = _spec("aten.masked_fill.Scalar", (torch.zeros(3, 4), torch.zeros(3, 4, dtype=torch.bool), -1.0))
    good = replay(spec, CPU)
    assert good.status.value == "pass" and good.metrics["variants"] == 3
    bad = replay(spec, Buggy())
    assert bad.status.value == "fail" and "a.1=all-false" in bad.reason


# ---------------------------------------------------------------- planted in the simulated device


def _suite_fault(name):
    from backend import faults

    return next(f for f in faults.load_suite() if f.name == name)


@pytest.mark.parametrize(
    "fault,op,args",
    [
        (
            "embedding-last-row",
            "aten.embedding.default",
            lambda: (torch.zeros(30522, 16), torch.zeros(2, 32, dtype=torch.long), 0),
        ),
        (
            "embedding-backward-padding-row",
            "aten.embedding_dense_backward.default",
            lambda: (torch.zeros(2, 32, 16), torch.zeros(2, 32, dtype=torch.long), 30522, 0, False),
        ),
        (
            "nll-loss-largest-class",
            "aten.nll_loss_forward.default",
            lambda: (torch.zeros(64, 30522), torch.zeros(64, dtype=torch.long), None, 1, -100),
        ),
    ],
)
def test_the_suites_boundary_faults_are_caught_by_the_unit_case(fault, op, args):
    from backend import faults
    from registry.unit_tier import execute

    payload = _spec(op, args()).to_payload()
    (clean,) = execute(payload, "neuron")
    assert clean.status.value == "pass", clean.reason
    with faults.planted(_suite_fault(fault)):
        (bad,) = execute(payload, "neuron")
    assert bad.status.value == "fail" and "mismatch" in bad.reason, (fault, bad.status, bad.reason)


# ------------------------------------------------ a mask whose True count another input's shape fixes


def _index_put(self_shape, mask_shape, values_shape, accumulate=True, before=()):
    return _spec(
        "aten.index_put.default",
        (
            torch.zeros(self_shape),
            [*before, torch.zeros(mask_shape, dtype=torch.bool)],
            torch.zeros(values_shape),
            accumulate,
        ),
    )


@pytest.mark.parametrize(
    "self_shape,mask_shape,values_shape,before,count",
    [
        ([2, 32], [2, 32], [61], (), 61),  # x[mask] = v: one value per True
        ([2, 32, 48], [2, 32], [0, 48], (), 0),  # rows selected by a 2-D mask, none of them
        ([4, 6, 8], [6], [4, 5, 8], (None,), 5),  # x[:, mask] = v: the count sits in the middle
    ],
)
def test_a_boolean_index_put_mask_has_as_many_trues_as_the_values(
    self_shape, mask_shape, values_shape, before, count
):
    spec = _index_put(self_shape, mask_shape, values_shape, before=before)
    inputs = _variant_inputs(spec)
    path = f"a.1.{len(before)}"
    assert set(inputs) == {boundaries.BASE, f"{path}=first-{count}", f"{path}=last-{count}"}
    for args in inputs.values():
        assert int(args[1][len(before)].sum()) == count
    mask = inputs[f"{path}=last-{count}"][1][len(before)].reshape(-1)
    assert count == 0 or bool(mask[-count:].all())
    result = replay(spec, get_backend("neuron"))
    assert result.status.value == "pass", result.reason
    assert result.metrics["variants"] == 3 and not result.metrics.get("variants_skipped")


def test_a_mask_the_values_broadcast_over_keeps_its_random_count_and_edges():
    spec = _index_put([2, 16, 32], [2, 16], [32])  # one row broadcast to every selected position
    inputs = _variant_inputs(spec)
    assert set(inputs) == {boundaries.BASE, "a.1.0=all-true", "a.1.0=all-false"}
    assert replay(spec, get_backend("neuron")).status.value == "pass"


def test_an_index_put_case_recorded_with_a_density_only_replays():
    """A registry row recorded before the rule (density 0.5, no count) gets the count at replay."""
    spec = _index_put([2, 32], [2, 32], [61])
    spec = CaseSpec(
        spec.op, spec.signature, {"a.1.0": {"kind": "mask", "density": 0.5, "source": "semantics"}}
    )
    result = replay(spec, get_backend("neuron"))
    assert result.status.value == "pass", result.reason


def test_a_strided_mask_gets_the_count_in_its_logical_elements():
    storage = torch.zeros(32, dtype=torch.bool)
    spec = _spec(
        "aten._index_put_impl_.default", (torch.zeros(16, 4), [storage[16:]], torch.zeros(15, 4), True, True)
    )
    assert '"off":16' in spec.signature
    (args,) = [a for n, a in _variant_inputs(spec).items() if n == boundaries.BASE]
    assert int(args[1][0].sum()) == 15
    assert replay(spec, get_backend("neuron")).status.value == "pass"
