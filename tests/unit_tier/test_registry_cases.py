"""The unit tier as pytest: one test per registry case, id = op + signature hash.

Registry: $HARNESS_REGISTRY, else the small bundled sample (registry/data/sample.parquet, ~400
cases of tiny BERT/Llama/GPT-2 training steps) so the default run stays fast. Backend:
$HARNESS_BACKEND (default neuron). Known failures come from registry/expectations/<backend>.yaml
and are xfail with their reason; an expected failure that passes shows as XPASS = IMPROVED
(`harness registry expectations update RUNDIR` rewrites the file from a harness run).

    HARNESS_REGISTRY=ops.parquet pytest tests/unit_tier -n 2
"""

from __future__ import annotations

import os
from importlib import resources

import pytest

from registry import expectations, unit_tier

BACKEND = os.environ.get("HARNESS_BACKEND", "neuron")
REGISTRY = os.environ.get("HARNESS_REGISTRY") or str(resources.files("registry").joinpath("data/sample.parquet"))


def _params() -> list:
    known = expectations.load(backend=BACKEND)
    params = []
    for case in unit_tier.cases(REGISTRY):
        marks = []
        if case.case_id in known:
            marks.append(pytest.mark.xfail(reason=f"expected {known[case.case_id].status}: {known[case.case_id].reason}",
                                           strict=False))
        params.append(pytest.param(case.payload, id=case.case_id, marks=marks))
    return params


@pytest.mark.parametrize("payload", _params())
def test_registry_case(payload: dict) -> None:
    (result,) = unit_tier.execute(payload, BACKEND)
    status = result.status.value
    if status in ("skipped", "not_attempted"):
        pytest.skip(result.reason)
    where = "native" if result.metrics.get("native") else f"fallback {result.metrics.get('fallback_ops')}"
    assert status == "pass", f"{status} ({where}): {result.reason} {result.error_class}: {result.message}"
