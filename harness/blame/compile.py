"""Blame's judgement of the compile stage and what "the same failure" means.

The compile stage is re-run on the reference backend through the device's own compile pipeline
(`compile_reference`): when that reference fails as the device did while its eager step passes,
the failure is PyTorch's compile stack, not the device (`judge_compile_pipeline`). A comparison
failure left on the backend is re-run once more on the device itself with `aot_eager`
(`device_graph_evidence`): that tells the device compiler's own difference from the graph's.
`same_way` is the comparison of two failures every probe of harness.blame.probe uses as well.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from contracts.records import StageResult
from contracts.status import Blame, Status
from contracts.timing import phase
from harness.blame import rules as rules_mod
from harness.blame.attributes import deadline
from harness.stages.compile import worst_compared

_NUMBER = re.compile(r"\d+")


def compile_reference(reference: Any, device: Any) -> Any:
    """The reference adapter whose compile stage follows the device's compile pipeline.

    A device declares `reference_compile_backend`: the CPU torch.compile backend that goes the
    same way as its own compiler (the simulated neuron: Dynamo -> AOTAutograd -> its partitions,
    so `aot_eager`, not inductor, which decomposes and partitions differently and can hide a
    failure of AOT autograd). Without a declaration the reference compiles with its own backend."""
    pipeline = device.reference_compile_backend
    if not pipeline or pipeline == reference.compile_backend:
        return reference
    out = copy.copy(reference)
    out.compile_backend = pipeline
    return out


def _compared_tensor(row: StageResult) -> str:
    """The tensor a failed compile comparison names ("step 1 gradient of <parameter>"), or ""."""
    return str(((row.metrics or {}).get("vs_eager") or {}).get("name") or "")


def judge_compile_pipeline(
    device: StageResult, ref: StageResult, reference: dict[str, StageResult]
) -> tuple[str, dict[str, Any]] | None:
    """upstream when the reference, compiled through the device's own pipeline, fails as the
    device did while its eager step passes: it raises the very error, or its compiled step differs
    from its eager step in the very tensor. The failure is then PyTorch's compile stack (Dynamo /
    AOT autograd, which both share) or the model's code under it, not the device's code. None:
    other rules judge."""
    if ref.status != device.status or device.status not in (Status.ERROR, Status.FAIL):
        return None
    eager = {s: reference[s].status.value for s in ("forward", "backward") if s in reference}
    if eager.get("forward") != Status.PASS.value or eager.get("backward") not in (
        Status.PASS.value,
        Status.SKIPPED.value,
    ):
        return None
    if device.status == Status.ERROR:
        if not same_way(
            ref, {"status": "error", "error_class": device.error_class, "message": device.message}
        ):
            return None
        return Blame.UPSTREAM.value, {
            "rule": "upstream.compile_pipeline",
            "compile_backend": ref.metrics.get("compile_backend", ""),
            "eager_on_reference": eager,
            "device_error": f"{device.error_class}: {device.message}"[:300],
            "reference_error": f"{ref.error_class}: {ref.message}"[:300],
            "why": (
                "the CPU compiled through the device's pipeline fails the same way while its eager step "
                "passes: PyTorch's compile stack (Dynamo / AOT autograd), not the device"
            ),
        }
    tensor = _compared_tensor(device)
    if not tensor or tensor != _compared_tensor(ref):
        return None
    return Blame.UPSTREAM.value, {
        "rule": "upstream.compile_pipeline",
        "compile_backend": ref.metrics.get("compile_backend", ""),
        "eager_on_reference": eager,
        "tensor": tensor,
        "device_reason": device.reason[:300],
        "reference_reason": ref.reason[:300],
        "why": (
            "compiled through the device's pipeline on the CPU, the same tensor differs from the CPU's "
            "eager step while that step passes: PyTorch's compile stack (Dynamo / AOT autograd) or the "
            "model's code under it, not the device"
        ),
    }


@phase("blame")  # the nightly's time shares (contracts.timing)
def device_graph_evidence(run: Any, run_stage: Callable[[Any, str], StageResult]) -> dict[str, Any] | None:
    """For a compile comparison failure (`fail`) blamed on the backend: the same step compiled on the
    device with its declared `reference_compile_backend` (the simulated neuron: `aot_eager`), i.e.
    the device's own eager kernels running the graph its compiler is handed.

    Its worst tensor is the device's, judged the same way and off by the same RMSE (within
    `reproduce_share`, relative; blame_rules' probe.device_graph) -> as far as that tensor shows, the
    compiler computes the graph as the eager kernels do, and the difference from the eager step is
    the graph's (AOTAutograd's decompositions and op order) under the device's arithmetic. It passes
    -> the difference is the compiler's own. Evidence, not a verdict: the blame stays `backend`
    either way. None (nothing said) when there is nothing to compare, the backend declares no such
    pipeline or compiles with it already, the device's compile took longer than a probe may
    (probe.timeout), or the probe cannot be set up."""
    rules = rules_mod.rules().probe
    settings = rules.device_graph
    row = run.result.stages.get("compile")
    if (
        not settings.enabled
        or row is None
        or row.status != Status.FAIL
        or getattr(run, "model", None) is None
    ):
        return None  # switched off, no comparison, or no device model to compile again
    pipeline = run.adapter.reference_compile_backend
    if not pipeline or run.adapter.compile_backend in (None, pipeline):
        return None
    limit = rules.timeout
    if limit and row.seconds > limit:  # a second compile as slow as the first would outlast the probe
        return None
    try:
        probe = copy.copy(run)  # the same model, inputs, eager step and reference; its own result and events
        probe.adapter = copy.copy(run.adapter)
        probe.adapter.compile_backend = pipeline
        probe.result = copy.copy(run.result)
        probe.result.stages = dict(run.result.stages)
        probe.fallback_events = []
        with deadline():
            got = run_stage(probe, "compile")
    except Exception:  # noqa: BLE001 - evidence that cannot be had says nothing; the verdict stands
        return None
    tensor, method, rmse, _ = worst_compared(row.metrics)
    probe_tensor, probe_method, probe_rmse, _ = (
        worst_compared(got.metrics) if got.status == Status.FAIL else ("", None, None, None)
    )
    same = (
        bool(tensor)
        and (probe_tensor, probe_method) == (tensor, method)
        and rmse is not None
        and probe_rmse is not None
        and abs(float(probe_rmse) - float(rmse)) <= settings.reproduce_share * abs(float(rmse))
    )
    kernels = f"the device's own eager kernels running the compiled graph ({pipeline})"
    if same:
        note = (
            f"{kernels} fail the same way ({tensor}, rmse {float(probe_rmse):.3g}): the difference is "
            "the graph's decompositions and op order under the device's arithmetic, not the compiler's"
        )
    elif got.status == Status.PASS:
        note = f"{kernels} pass: the difference is the compiler's own"
    elif got.status == Status.FAIL:
        note = (
            f"{kernels} fail otherwise ({probe_tensor or 'another comparison'}, {probe_method}, rmse "
            f"{float(probe_rmse or 0.0):.3g}): the compiler adds a difference of its own"
        )
    else:
        note = f"{kernels} could not be compared ({got.status.value}: {got.reason[:120]})"
    return {
        "compile_backend": pipeline,
        "status": got.status.value,
        "tensor": probe_tensor or None,
        "method": probe_method,
        "rmse": probe_rmse,
        "device_rmse": rmse,
        "reproduces": same,
        "note": note,
    }


def _masked(text: str) -> str:
    settings = rules_mod.rules().probe.same_way
    text = (text or "").strip()
    for name, patterns in settings.same_failure.items():
        if any(re.search(p, text) for p in patterns):
            return name
    if settings.mask_numbers:
        text = _NUMBER.sub("#", text)
    return text[: settings.compare_chars]


def same_way(row: StageResult, probe: dict[str, Any]) -> bool:
    """Does the probe fail as the reference did (same exception type and message, numbers masked;
    a message the FakeTensor kernel words otherwise counts as the same, blame_rules' same_failure)?"""
    if row.status == Status.FAIL:
        return probe.get("status") == "fail" and _masked(row.reason) == _masked(probe.get("reason", ""))
    return (
        probe.get("status") == "error"
        and probe.get("error_class") == row.error_class
        and _masked(row.message) == _masked(probe.get("message", ""))
    )
