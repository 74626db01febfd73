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


# ------------------------------------------------------------------------------------- root causes


def mismatch_cause(op: str, phase: str, max_abs: float, repro: str, verified: bool | None, **kw: Any) -> dict:
    """A found root cause (contracts.rootcause.RootCause.to_dict()) of kind mismatch."""
    from contracts.rootcause import Mismatch, Repro, RootCause

    return RootCause(
        found=True,
        op=op,
        phase=phase,
        kind="mismatch",
        route=kw.pop("route", "compiled_shadow" if phase == "compiled" else "eager_shadow"),
        call_index=kw.pop("call_index", 12),
        input_shapes=[[2, 8]],
        input_dtypes=["float32"],
        input_strides=[[8, 1]],
        mismatch=Mismatch("0", max_abs, max_abs * 10, 1e-5, 1.3e-6, "float32", [2, 8], "float32"),
        module_path=kw.pop("module_path", "encoder.layer.3.attention.self"),
        source_line=kw.pop("source_line", "modeling_bert.py:255 in forward"),
        repro=Repro(path=repro, registry_key=f"{op}/sig", verified=verified, why=kw.pop("why", "")),
        **kw,
    ).to_dict()


def event_cause(op: str, kind: str, route: str, **kw: Any) -> dict:
    """A found root cause of kind error, crash or hang."""
    from contracts.rootcause import Repro, RootCause

    return RootCause(
        found=True,
        op=op,
        phase=kw.pop("phase", "forward"),
        kind=kind,
        route=route,
        call_index=3,
        repro=Repro(path=f"repros/test_{op.split('.')[1]}.py", verified=True),
        **kw,
    ).to_dict()


def not_found_cause(why: str, gave_up: str = "") -> dict:
    from contracts.rootcause import RootCause

    return RootCause.not_found(why, seconds=60.0 if gave_up else 1.0, gave_up=gave_up).to_dict()


#: (case, stage) -> (status, reason, error_class, root cause); every one blamed on the backend
ROOT_CAUSES: dict[tuple[str, str], tuple[str, str, str, dict]] = {
    # two cases localized to one op in the forward phase: one group; rep/gpt2 has the larger error
    ("rep/bert", "numerics"): (
        "fail",
        "logits off by 2e-3",
        "",
        mismatch_cause("aten.gelu.default", "forward", 2e-3, "repros/test_gelu.py", True),
    ),
    ("rep/gpt2", "numerics"): (
        "fail",
        "logits off by 4e-2",
        "",
        mismatch_cause(
            "aten.gelu.default", "forward", 4e-2, "repros/test_gelu_2.py", False, why="passes on the device"
        ),
    ),
    # the same op in another phase is another root cause
    ("full/a", "backward"): (
        "fail",
        "grad of encoder.layer.0.weight off",
        "",
        mismatch_cause("aten.gelu_backward.default", "backward", 5e-3, "repros/test_gelu_backward.py", True),
    ),
    ("full/d", "compile"): (
        "fail",
        "compiled logits off",
        "",
        mismatch_cause("aten.addmm.default", "compiled", 1e-2, "repros/test_addmm.py", True),
    ),
    ("rep/vit", "forward"): (
        "error",
        "",
        "RuntimeError",
        event_cause(
            "aten.mm.default", "error", "eager_shadow", error_class="RuntimeError", message="bad kernel"
        ),
    ),
    ("rep/t5", "forward"): (
        "crash",
        "worker died",
        "SIGSEGV",
        event_cause("aten.bmm.default", "crash", "call_journal"),
    ),
    # a localization that gave up at its time limit: listed without a root cause, with why
    ("full/g", "load"): (
        "timeout",
        "timeout after 60 s",
        "",
        not_found_cause("the localization time limit (60 s) was reached", gave_up="time limit"),
    ),
}


def with_root_causes(rows: list[dict[str, Any]]) -> None:
    """Backend failures with root causes: found (eager and compiled phases, several cases sharing
    one op), not found (gave up); and some without any (an op-level case, CPU fallbacks). rep/t5
    loads, then crashes in forward."""
    for (case_id, stage), (status, reason, error_class, record) in ROOT_CAUSES.items():
        if case_id == "rep/t5":
            set_status(rows, case_id, "load", "pass")
        set_status(
            rows, case_id, stage, status, reason, error_class=error_class, blame="backend", root_cause=record
        )
    for r in rows:  # the unit tier's failure and the fallbacks are the device's too (neither localized)
        if r["case_id"] == "unit/op3" or (r["stage"] == "on_device" and r["status"] == "fail"):
            r["blame"] = "backend"
