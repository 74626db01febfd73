"""Inputs of a replayed case: a counted mask is rebuilt with its count in the layout recorded."""

from __future__ import annotations

import pytest
import torch

from registry.encoding import encode_args
from registry.inputs import build_tensor


@pytest.mark.parametrize(
    "shape, expanded, count",
    [
        ((2, 36, 1), (2, 36, 48), 8 * 48),  # mask.unsqueeze(-1).expand_as(hidden): 8 positions
        ((2, 1, 6), (2, 5, 6), 3 * 5),  # expanded in the middle
        ((1, 1), (4, 4), 0),
    ],
)
def test_an_expanded_mask_gets_its_count_in_the_elements_it_shows(shape, expanded, count):
    """An expanded view repeats each stored value: the count recorded is of the view, so the
    stored mask holds count / repeats Trues (it used to get the whole count and overflow)."""
    view = torch.zeros(shape, dtype=torch.bool).expand(expanded)
    (enc,), _ = encode_args((view,), {})
    assert 0 in enc["st"]
    for place in (None, "first", "last"):
        c = {"kind": "mask", "count": count, "source": "observed", **({"place": place} if place else {})}
        built = build_tensor(enc, c, torch.Generator().manual_seed(0))
        assert built.cpu.shape == expanded and built.cpu.stride() == view.stride()
        assert int(built.cpu.sum()) == count
        # still an expansion: every stored value repeated along the stride-0 dims
        assert torch.equal(
            built.cpu,
            built.cpu.amax(dim=[d for d, st in enumerate(enc["st"]) if st == 0], keepdim=True).expand(
                expanded
            ),
        )
