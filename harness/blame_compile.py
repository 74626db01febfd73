"""Blame's judgement of the compile stage and what "the same failure" means.

The compile stage is re-run on the reference backend through the device's own compile pipeline
(`compile_reference`): when that reference fails as the device did while its eager step passes,
the failure is PyTorch's compile stack, not the device (`judge_compile_pipeline`). `same_way` is
the comparison of two failures every probe of harness.blame_probe uses as well.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from contracts.records import StageResult
from contracts.status import Blame, Status
from harness import blame as rules_mod

_NUMBER = re.compile(r"\d+")


def compile_reference(reference: Any, device: Any) -> Any:
    """The reference adapter whose compile stage follows the device's compile pipeline.

    A device declares `reference_compile_backend`: the CPU torch.compile backend that goes the
    same way as its own compiler (the simulated neuron: Dynamo -> AOTAutograd -> its partitions,
    so `aot_eager`, not inductor, which decomposes and partitions differently and can hide a
    failure of AOT autograd). Without a declaration the reference compiles with its own backend."""
    pipeline = getattr(device, "reference_compile_backend", None)
    if not pipeline or pipeline == reference.compile_backend:
        return reference
    out = copy.copy(reference)
    out.compile_backend = pipeline
    return out


def _compared_tensor(row: StageResult) -> str:
    """The tensor a failed compile comparison names ("step 1 gradient of <parameter>"), or ""."""
    return str(((row.metrics or {}).get("vs_eager") or {}).get("name") or "")


def judge_compile_pipeline(device: StageResult, ref: StageResult,
                           reference: dict[str, StageResult]) -> tuple[str, dict[str, Any]] | None:
    """upstream when the reference, compiled through the device's own pipeline, fails as the
    device did while its eager step passes: it raises the very error, or its compiled step differs
    from its eager step in the very tensor. The failure is then PyTorch's compile stack (Dynamo /
    AOT autograd, which both share) or the model's code under it, not the device's code. None:
    other rules judge."""
    if ref.status != device.status or device.status not in (Status.ERROR, Status.FAIL):
        return None
    eager = {s: reference[s].status.value for s in ("forward", "backward") if s in reference}
    if eager.get("forward") != Status.PASS.value or eager.get("backward") not in (Status.PASS.value, Status.SKIPPED.value):
        return None
    if device.status == Status.ERROR:
        if not same_way(ref, {"status": "error", "error_class": device.error_class, "message": device.message}):
            return None
        return Blame.UPSTREAM.value, {
            "rule": "upstream.compile_pipeline", "compile_backend": ref.metrics.get("compile_backend", ""),
            "eager_on_reference": eager, "device_error": f"{device.error_class}: {device.message}"[:300],
            "reference_error": f"{ref.error_class}: {ref.message}"[:300],
            "why": ("the CPU compiled through the device's pipeline fails the same way while its eager step "
                    "passes: PyTorch's compile stack (Dynamo / AOT autograd), not the device")}
    tensor = _compared_tensor(device)
    if not tensor or tensor != _compared_tensor(ref):
        return None
    return Blame.UPSTREAM.value, {
        "rule": "upstream.compile_pipeline", "compile_backend": ref.metrics.get("compile_backend", ""),
        "eager_on_reference": eager, "tensor": tensor, "device_reason": device.reason[:300],
        "reference_reason": ref.reason[:300],
        "why": ("compiled through the device's pipeline on the CPU, the same tensor differs from the CPU's "
                "eager step while that step passes: PyTorch's compile stack (Dynamo / AOT autograd) or the "
                "model's code under it, not the device")}


def _masked(text: str) -> str:
    settings = rules_mod.rules()["probe"]["same_way"]
    text = (text or "").strip()
    for name, patterns in (settings.get("same_failure") or {}).items():
        if any(re.search(p, text) for p in patterns):
            return name
    if settings.get("mask_numbers", True):
        text = _NUMBER.sub("#", text)
    return text[: int(settings.get("compare_chars", 200))]


def same_way(row: StageResult, probe: dict[str, Any]) -> bool:
    """Does the probe fail as the reference did (same exception type and message, numbers masked;
    a message the FakeTensor kernel words otherwise counts as the same, blame_rules' same_failure)?"""
    if row.status == Status.FAIL:
        return probe.get("status") == "fail" and _masked(row.reason) == _masked(probe.get("reason", ""))
    return (probe.get("status") == "error" and probe.get("error_class") == row.error_class
            and _masked(row.message) == _masked(probe.get("message", "")))
