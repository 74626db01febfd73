"""Value constraints from op semantics: a boolean mask whose True count another argument's size
fixes gets that count, so the replayed call is valid on the CPU reference whatever was recorded."""

from __future__ import annotations

import json

import pytest
import torch

from contracts.backends import get_backend
from contracts.rulefiles import RuleFileError, load_rules, resource
from registry.constraints import OpSemantics, infer_constraints
from registry.encoding import encode_args, signature
from registry.replay import CaseSpec, plan, replay


def _spec(op, args, constraints=None):
    a, k = encode_args(args, {})
    return CaseSpec(op, signature(a, k), constraints or {})


def _mask(*shape):
    return torch.zeros(shape, dtype=torch.bool)


X = torch.zeros(2, 6, 8)

#: (op, args, the mask's path, the count the shapes allow)
MASKS = [
    # a mask over rows (broadcast over the hidden dim): 3 rows of 8 fill the source's 24 elements
    ("aten.masked_scatter.default", (X, _mask(2, 6, 1), torch.zeros(3, 8)), "a.1", 3),
    ("aten.masked_scatter_.default", (X.clone(), _mask(2, 6, 8), torch.zeros(20)), "a.1", 20),
    # a source that no count fills exactly: the most rows that fit (4 x 8 <= 35)
    ("aten.masked_scatter.default", (X, _mask(2, 6, 1), torch.zeros(5, 7)), "a.1", 4),
    ("aten.masked_scatter.default", (X, _mask(2, 6, 1), torch.zeros(0, 8)), "a.1", 0),
    ("aten.masked_scatter_backward.default", (X, _mask(2, 6, 1), [3, 8]), "a.1", 3),
    # a mask [6, 8] broadcast over a batch of 2: each True selects 2 of the grad's 40 elements
    ("aten.masked_select_backward.default", (torch.zeros(40), X, _mask(6, 8)), "a.2", 20),
]


@pytest.mark.parametrize("op, args, path, count", MASKS)
def test_a_mask_selects_what_the_other_argument_holds(op, args, path, count):
    spec = _spec(op, args)
    sig = json.loads(spec.signature)
    c = infer_constraints(op, sig["a"], sig["k"])[path]
    assert c["kind"] == "mask" and c["count"] == count and c["source"] == "semantics"
    result = replay(spec, get_backend("neuron"))
    assert result.status.value == "pass", result.reason
    assert not result.metrics.get("variants_skipped")  # the first/last placements fit as well


@pytest.mark.parametrize("op, args, path, count", MASKS[:1] + MASKS[4:5])
def test_a_recorded_count_that_does_not_fit_the_shapes_is_replaced(op, args, path, count):
    """An observed count is of the model's call; the semantic one follows the shapes (also after
    scaling), so a stored count that does not fit them no longer makes the CPU reference raise."""
    spec = _spec(op, args, {path: {"kind": "mask", "density": 1.0, "count": 12, "source": "observed"}})
    p = plan(spec)
    assert not p.skip, p.skip
    mask = p.built[0][int(path.split(".")[1])].cpu
    assert int(mask.sum()) == count


def test_a_mask_count_rule_takes_exactly_one_form(tmp_path):
    text = resource("registry", "data/op_semantics.yaml").read_text()
    bad = tmp_path / "op_semantics.yaml"
    bad.write_text(
        text.replace(
            "mask_count: {numel_of: 2, broadcast_with: 0}",
            "mask_count: {numel_of: 2, values_of: 2}",
            1,
        )
    )
    with pytest.raises(RuleFileError) as info:
        load_rules(OpSemantics, bad)
    assert str(bad) in str(info.value) and "exactly one of values_of, numel_of" in str(info.value)
