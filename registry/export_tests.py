"""Standalone pytest files for a subset of registry cases, for reproduction outside the harness.

One file per op (``test_aten_addmm_default.py``), or one per case (``per_case=True``: a root
cause's repro, ``test_aten_addmm_default_1f2e3d4c5b6a.py``), rendered from
templates/standalone_test.py.jinja: the cases' encoded arguments (already fitted to the replay
budget), their constraints (a repro's concrete values among them), seed, tolerances and how the
case runs (eagerly, or through the device's compiler) are embedded as data; the file itself needs
only torch and the device's own module. Where the backend declares it rounds an op's inputs
(`rounded_inputs()`), the reference in the file rounds the same arguments and the tolerance is the
dtype's own, as the unit tier's replay judges it.

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
from registry.encoding import parse_signature, run_of, signature_hash
from registry.replay import resolve_op
from registry.store import Registry
from registry.tolerances import tolerance_for


def _case_data(
    entry: Any, mode: str, rounded: dict[str, tuple[str, ...]] | None = None
) -> dict[str, Any] | None:
    a_enc, k_enc = parse_signature(entry.signature)
    try:
        func = resolve_op(entry.op)
        constraints = {**entry.constraints, **infer_constraints(entry.op, a_enc, k_enc)}
        constraints.update({p: c for p, c in entry.constraints.items() if c.get("kind") == "values"})
        a_enc, k_enc, constraints, _ = scaling.fit(func, a_enc, k_enc, constraints)
    except Exception:  # noqa: BLE001 - unreplayable cases are not exported
        return None
    names = list((rounded or {}).get(entry.op.rsplit(".", 1)[0], ()))
    mode = "exact" if names else mode  # the reference rounds as the device: the dtype's own tolerance
    out_dtypes = [o.get("dt") for o in entry.outputs if isinstance(o, dict) and "T" in o]
    tols = []
    for dt in out_dtypes:
        t = tolerance_for(entry.op, dt or "", mode)
        tols.append(None if t.exact else {"rtol": t.rtol, "atol": t.atol, "atol_rms": t.atol_rms})
    data = {
        "op": entry.op,
        "args": a_enc,
        "kwargs": k_enc,
        "constraints": constraints,
        "seed": int(signature_hash(entry.op, entry.signature)[:8], 16),
        "tolerances": tols,
        "metadata_only": is_metadata_only(entry.op),
        "models": entry.models,
    }
    if names:
        data["rounded"] = names
    if run_of(entry.signature):
        data["run"] = run_of(entry.signature)
    return data


def device_facts(backend: str, mode: str | None) -> dict[str, Any]:
    """What a standalone file needs to know of the backend: its device type, the module to import
    to register it, its compiler, its precision mode and declared input rounding."""
    facts: dict[str, Any] = {
        "device": backend,
        "device_module": "backend" if backend == "neuron" else "",
        "compiler": "",
        "mode": mode or ("bf16" if backend == "neuron" else "exact"),
        "rounded": {},
    }
    try:
        from contracts.backends import get_backend

        adapter = get_backend(backend)
    except Exception:  # noqa: BLE001 - an unknown backend: the file names the device as given
        return facts
    package = type(adapter).__module__.split(".")[0]
    facts["device"] = adapter.device_type
    facts["device_module"] = "" if package == "contracts" else package
    facts["compiler"] = str(adapter.compile_backend or "")
    facts["mode"] = mode or adapter.precision_mode()
    declared = getattr(adapter, "rounded_inputs", None)
    facts["rounded"] = dict(declared() or {}) if callable(declared) else {}
    return facts


def file_name(op: str, case_id: str | None = None) -> str:
    """`test_aten_addmm_default.py`, or with a case: `test_aten_addmm_default_1f2e3d4c5b6a.py`."""
    stem = "test_" + re.sub(r"[^0-9a-zA-Z]+", "_", op).strip("_")
    return f"{stem}_{case_id.rpartition('-')[2]}.py" if case_id else f"{stem}.py"


def render(op: str, cases: dict[str, dict[str, Any]], facts: dict[str, Any], filename: str) -> str:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: resources.files("registry").joinpath(f"templates/{name}").read_text()
        ),
        keep_trailing_newline=True,
    )
    return env.get_template("standalone_test.py.jinja").render(
        op=op,
        cases=cases,
        backend=facts["device"],
        device=facts["device"],
        device_module=facts["device_module"],
        compiler=facts["compiler"],
        filename=filename,
        cases_json=pprint.pformat(cases, width=110, sort_dicts=True),
    )


def export_tests(
    registry: Registry,
    out_dir: str | Path,
    ops: Iterable[str] | None = None,
    backend: str = "neuron",
    mode: str | None = None,
    per_case: bool = False,
) -> dict[str, Any]:
    facts = device_facts(backend, mode)
    wanted = set(ops or [])
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    skipped = 0
    for entry in registry:
        if wanted and entry.op not in wanted:
            continue
        data = _case_data(entry, facts["mode"], facts["rounded"])
        if data is None:
            skipped += 1
            continue
        groups.setdefault((entry.op, entry.case_id if per_case else ""), {})[entry.case_id] = data
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for (op, case_id), cases in sorted(groups.items()):
        filename = file_name(op, case_id or None)
        (out_dir / filename).write_text(render(op, cases, facts, filename), encoding="utf-8")
        files.append(str(out_dir / filename))
    return {
        "files": files,
        "ops": len({op for op, _ in groups}),
        "cases": sum(len(c) for c in groups.values()),
        "not_exported": skipped,
        "torch": torch.__version__,
    }
