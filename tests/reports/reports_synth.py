"""Synthetic rows for the report tests, as the runner writes them, with known denominators."""

from __future__ import annotations

from typing import Any

from contracts.status import MODEL_STAGES

STAGES = MODEL_STAGES  # load, forward, backward, compile, numerics, on_device


def _model_case(
    tier: str,
    case_id: str,
    model_ids: list[str],
    weight: float,
    outcome: dict[str, tuple],
    traits: dict[str, Any],
) -> list[dict[str, Any]]:
    """outcome: stage -> (status, reason[, error_class]); stages not named pass."""
    rows = []
    for stage in STAGES:
        status, reason, *err = outcome.get(stage, ("pass", ""))
        rows.append(
            {
                "tier": tier,
                "case_id": case_id,
                "model_id": model_ids[0],
                "model_ids": list(model_ids),
                "stage": stage,
                "status": status,
                "reason": reason,
                "error_class": err[0] if err else "",
                "message": f"{err[0]}: boom" if err else "",
                "seconds": 2.0,
                "weight": weight,
                "fallback_count": 0,
                "fallback_ops": [],
                "peak_memory_bytes": 1 << 20,
                "traits": traits,
            }
        )
    return rows


NA = ("not_attempted", "an earlier stage failed")


def base_rows() -> list[dict[str, Any]]:
    """A run with three tiers. Full tier: 6 models / 1000 downloads; 5 load, 5 compute, 3 on device."""
    text, vision = {"modality": "text", "attention": ["sdpa", "eager"]}, {"modality": "vision"}
    rows = []
    rows += _model_case("representative", "rep/bert", ["bert"], 1000, {}, text)
    rows += _model_case(
        "representative",
        "rep/gpt2",
        ["gpt2"],
        500,
        {"backward": ("skipped", "no loss"), "on_device": ("fail", "fallback: aten::_cdist_forward")},
        text,
    )
    rows += _model_case(
        "representative",
        "rep/vit",
        ["vit"],
        300,
        {
            "forward": ("error", "", "RuntimeError"),
            "backward": NA,
            "compile": NA,
            "numerics": NA,
            "on_device": NA,
        },
        vision,
    )
    rows += _model_case(
        "representative",
        "rep/t5",
        ["t5"],
        200,
        {s: NA for s in STAGES[1:]} | {"load": ("error", "", "OSError")},
        text,
    )
    rows += _model_case("full", "full/a", ["a", "b", "c"], 600, {}, text)
    rows += _model_case(
        "full", "full/d", ["d", "e"], 400, {"on_device": ("fail", "fallback: aten::foo")}, vision
    )
    rows += _model_case(
        "full",
        "full/g",
        ["g"],
        0,
        {"load": ("timeout", "timeout after 60 s")} | {s: NA for s in STAGES[1:]},
        vision,
    )
    for row in rows:
        if row["case_id"] == "rep/gpt2" and row["stage"] == "on_device":
            row.update(fallback_count=7, fallback_ops=["aten::_cdist_forward"])
        if row["case_id"] == "full/d" and row["stage"] == "on_device":
            row.update(fallback_count=3, fallback_ops=["aten::foo"])
    for i, (status, reason) in enumerate(
        [
            ("pass", ""),
            ("pass", ""),
            ("pass", ""),
            ("fail", "mismatch"),
            ("skipped", "dtype float64 not supported"),
        ]
    ):
        rows.append(
            {
                "tier": "unit",
                "case_id": f"unit/op{i}",
                "stage": "op",
                "status": status,
                "reason": reason,
                "seconds": 0.1,
                "native_op_calls": {"aten::add.Tensor": 2},
            }
        )
    return rows


EVENTS = [
    {
        "model_id": "gpt2",
        "op": "aten::_cdist_forward",
        "input_shapes": [[2, 3], [4, 3]],
        "input_dtypes": ["float32", "float32"],
        "reason": "no lowering",
        "frame": "modeling.py:10 in fwd",
        "count": 7,
    },
    {
        "model_id": "d",
        "tier": "full",
        "case_id": "full/d",
        "op": "aten::foo",
        "input_shapes": "[[1]]",
        "input_dtypes": "[float32]",
        "reason": "no lowering",
        "frame": "x.py:1 in f",
        "count": 3,
    },
]


def set_status(
    rows: list[dict[str, Any]], case_id: str, stage: str, status: str, reason: str = "", **extra: Any
) -> None:
    hit = [r for r in rows if r["case_id"] == case_id and r["stage"] == stage]
    assert hit, (case_id, stage)
    for r in hit:
        r.update(status=status, reason=reason, **extra)
