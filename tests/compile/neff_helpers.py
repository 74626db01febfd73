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
