"""The upstream tier: PyTorch's op_db OpInfo samples on the device (registry.upstream)."""

from __future__ import annotations

from typing import Any

from contracts.records import Case
from contracts.settings import TIER_LIMITS
from contracts.status import UPSTREAM_STAGES
from contracts.tiers import TierInputs


class UpstreamTier:
    """PyTorch's op_db OpInfo samples, every CPU dtype, forward and backward (registry.upstream).

    Options (``--ops``, ``--dtypes``): comma-separated OpInfo name globs and dtype names."""

    name = "upstream"
    stages = UPSTREAM_STAGES
    chunk_size = 32
    timeout = TIER_LIMITS["upstream"].timeout  # per case, and per chunk of 32 (a sample takes milliseconds)
    max_cases_per_worker = TIER_LIMITS["upstream"].max_cases_per_worker  # a restart imports torch and op_db

    def setup(self, backend: str) -> None:
        from registry.upstream import worker

        worker.context(backend)

    def cases(self, inputs: TierInputs) -> list[Case]:
        from registry.upstream import listing

        opts = inputs.options
        dtypes = opts.get("dtypes")
        if isinstance(dtypes, str):
            dtypes = [d for d in dtypes.split(",") if d.strip()]
        groups = listing.list_groups(
            opts.get("ops"),
            dtypes,
            workers=int(opts.get("workers", 1) or 1),
            progress=bool(opts.get("progress", True)),
        )
        return listing.to_cases(groups)

    def execute(self, case: Case, backend: str) -> Any:
        return self.execute_many([case], backend)[0]

    def execute_many(self, cases: list[Case], backend: str) -> list[Any]:
        from registry.upstream import worker

        return worker.execute_many([(c.case_id, c.payload) for c in cases], backend)
