"""Standalone pytest files for a subset of registry cases, for reproduction outside the harness.

One file per op (``test_aten_addmm_default.py``), rendered from templates/standalone_test.py.jinja:
the cases' encoded arguments (already fitted to the replay budget), their constraints, seed and
tolerances are embedded as data; the file itself needs only torch.

    export_tests(Registry.load("ops.parquet"), "repro/", ops=["aten.addmm.default"])
"""

from __future__ import annotations

import pprint
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import torch

from registry import scaling
from registry.constraints import infer_constraints, is_metadata_only
from registry.encoding import parse_signature, signature_hash
from registry.replay import resolve_op
from registry.store import Registry
from registry.tolerances import tolerance_for


def _case_data(entry: Any, mode: str) -> dict[str, Any] | None:
    a_enc, k_enc = parse_signature(entry.signature)
    try:
        func = resolve_op(entry.op)
        constraints = {**entry.constraints, **infer_constraints(entry.op, a_enc, k_enc)}
        a_enc, k_enc, constraints, _ = scaling.fit(func, a_enc, k_enc, constraints)
    except Exception:  # noqa: BLE001 - unreplayable cases are not exported
        return None
    out_dtypes = [o.get("dt") for o in entry.outputs if isinstance(o, dict) and "T" in o]
    tols = []
    for dt in out_dtypes:
        t = tolerance_for(entry.op, dt or "", mode)
        tols.append(None if t.exact else {"rtol": t.rtol, "atol": t.atol, "atol_rms": t.atol_rms})
    return {
        "op": entry.op,
        "args": a_enc,
        "kwargs": k_enc,
        "constraints": constraints,
        "seed": int(signature_hash(entry.op, entry.signature)[:8], 16),
        "tolerances": tols,
        "metadata_only": is_metadata_only(entry.op),
        "models": entry.models,
    }


def export_tests(
    registry: Registry,
    out_dir: str | Path,
    ops: Iterable[str] | None = None,
    backend: str = "neuron",
    mode: str | None = None,
) -> dict[str, Any]:
    mode = mode or ("bf16" if backend == "neuron" else "exact")
    wanted = set(ops or [])
    by_op: dict[str, dict[str, Any]] = {}
    skipped = 0
    for entry in registry:
        if wanted and entry.op not in wanted:
            continue
        data = _case_data(entry, mode)
        if data is None:
            skipped += 1
            continue
        by_op.setdefault(entry.op, {})[entry.case_id] = data
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: resources.files("registry").joinpath(f"templates/{name}").read_text()
        ),
        keep_trailing_newline=True,
    )
    template = env.get_template("standalone_test.py.jinja")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for op, cases in sorted(by_op.items()):
        filename = "test_" + re.sub(r"[^0-9a-zA-Z]+", "_", op).strip("_") + ".py"
        text = template.render(
            op=op,
            cases=cases,
            backend=backend,
            filename=filename,
            cases_json=pprint.pformat(cases, width=110, sort_dicts=True),
        )
        (out_dir / filename).write_text(text, encoding="utf-8")
        files.append(str(out_dir / filename))
    return {
        "files": files,
        "ops": len(by_op),
        "cases": sum(len(c) for c in by_op.values()),
        "not_exported": skipped,
        "torch": torch.__version__,
    }
