"""The unit tier as pytest: one test per registry case, id = op + signature hash.

Registry: $HARNESS_REGISTRY, else the small bundled sample (registry/data/sample.parquet, ~400
cases of tiny BERT/Llama/GPT-2 training steps) so the default run stays fast. Backend:
$HARNESS_BACKEND (default neuron). Known failures are the expectations of that backend
(reports.expectations: reports/data/expectations.yaml or $HARNESS_EXPECTATIONS), xfail with their
reason; an expected failure that passes shows as XPASS = IMPROVED (`harness registry expectations
update RUNDIR` rewrites the unit-tier entries from a harness run). A backend that cannot be
imported fails every case (it is the finding), it is never a skip.

    HARNESS_REGISTRY=ops.parquet pytest tests/unit_tier -n 2
"""

from __future__ import annotations

import functools
from importlib import resources

import pytest

from contracts.backends import get_backend
from contracts.settings import current
from contracts.status import UNIT_STAGES
from registry import unit_tier
from reports.expectations import Index, load_expectations

BACKEND = current().backend
REGISTRY = str(current().registry or resources.files("registry").joinpath("data/sample.parquet"))


def _params() -> list:
    known = Index(load_expectations(), BACKEND)
    params = []
    for case in unit_tier.cases(REGISTRY):
        marks = []
        rules = known.matching("unit", case.case_id, UNIT_STAGES[0], case.model_ids)
        if rules:
            marks.append(
                pytest.mark.xfail(
                    reason=f"expected {'/'.join(rules[0].status) or 'failure'}: {rules[0].reason}",
                    strict=False,
                )
            )
        params.append(pytest.param(case.payload, id=case.case_id, marks=marks))
    return params


@functools.cache
def backend_error() -> str:
    """Why the backend under test cannot be imported ("" when it can)."""
    try:
        get_backend(BACKEND)
    except Exception as exc:  # noqa: BLE001 - the reason is the failure message
        return f"{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.parametrize("payload", _params())
def test_registry_case(payload: dict) -> None:
    if backend_error():  # every case fails with the reason: a backend that does not import is the finding
        pytest.fail(f"backend {BACKEND!r} cannot be imported: {backend_error()}", pytrace=False)
    (result,) = unit_tier.execute(payload, BACKEND)
    status = result.status.value
    if status == "skipped":  # the case is not replayable (the reason says why): not the backend's doing
        pytest.skip(result.reason)
    where = "native" if result.metrics.get("native") else f"fallback {result.metrics.get('fallback_ops')}"
    assert status == "pass", f"{status} ({where}): {result.reason} {result.error_class}: {result.message}"
