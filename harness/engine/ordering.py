"""Likely failures first: the order in which a run executes its cases.

Why: the figure a backend engineer feels is how long until the first red row. Execution order is
the only thing changed here; which cases run (the tier's listing, `--limit`, `--shard`) and their
results are not, so ordering can never change a result, a shard or a resumed run's remainder.

Cases run in three classes, each by download weight (heaviest first), ties in listing order:

1. ``baseline_failure`` - the case, or one of its models in any tier, did not pass in the baseline;
2. ``changed_op``       - an op the case runs (unit case: its op; model case: the ops the shape
                          registry recorded for its models, else for its model type) changed
                          since the baseline, as the backend's per-op fingerprints say
                          (`op_fingerprints()` of the adapter, e.g. backend/fingerprints.py; a
                          backend without them, or a baseline recorded before them: no op is
                          known to have changed);
3. ``rest``.

The fingerprints of every run are stored in its run metadata (runs.parquet `extra`), so each run
can serve as the next run's baseline. `order-<tier>.json` in the run directory says why each case
ran where it did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from contracts.records import Case
from contracts.status import FAILING_VALUES

ORDERS = ("likely-failures", "listed")
DEFAULT_ORDER = "likely-failures"
CLASSES = ("baseline_failure", "changed_op", "rest")
FINGERPRINT_KEY = "op_fingerprints"


# ------------------------------------------------------------------------------- fingerprints


def probe_fingerprints(backend: str, sys_path: list[str] | None = None) -> subprocess.Popen:
    """Start a child that prints the backend's op fingerprints as JSON (the runner itself never
    imports a device extension); `collect_fingerprints` reads its answer."""
    code = (
        "import json, sys\n"
        "sys.path[:0] = json.loads(sys.argv[2])\n"
        "from harness.engine.ordering import fingerprints_of\n"
        "print(json.dumps(fingerprints_of(sys.argv[1])))\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, backend, json.dumps(sys_path or [])],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


#: A started fingerprint probe, named by what its fingerprints depend on (`start_probe`).
ProbeKey = tuple
_PROBED: dict[ProbeKey, Any] = {}


def _probe_key(backend: str) -> ProbeKey:
    """What the fingerprints of one process's backend depend on besides the code: its variables."""
    return (
        backend,
        tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("NEURON_", "HARNESS_")))),
    )


def start_probe(backend: str) -> ProbeKey:
    """Start probing (once per process and backend: a nightly's tiers share one probe)."""
    key = _probe_key(backend)
    if key not in _PROBED:
        try:
            _PROBED[key] = probe_fingerprints(backend, list(sys.path))
        except OSError:
            _PROBED[key] = None
    return key


def finish_probe(key: ProbeKey) -> dict[str, Any] | None:
    value = _PROBED.get(key)
    if isinstance(value, subprocess.Popen):
        value = _PROBED[key] = collect_fingerprints(value)
    return value


def collect_fingerprints(proc: subprocess.Popen | None, timeout: float = 300.0) -> dict[str, Any] | None:
    """The probe's fingerprints; None when the backend has none or the probe failed (the run then
    orders by baseline failures and weight only: ordering never fails a run)."""
    if proc is None:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    if proc.returncode != 0:
        return None
    try:
        value = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("ops"), dict) else None


def fingerprints_of(backend: str) -> dict[str, Any] | None:
    """The adapter's `op_fingerprints()`, or None when it has none ({})."""
    from contracts.backends import get_backend

    return get_backend(backend).op_fingerprints() or None


@dataclass(frozen=True)
class Changed:
    """Ops whose fingerprint differs between two runs. `everything`: the shared path changed, so
    every op may behave differently (no op is singled out); `known` False: one side has no
    fingerprints (nothing is known to have changed)."""

    keys: frozenset[str] = frozenset()
    everything: bool = False
    known: bool = False

    def touches(self, ops: Iterable[str]) -> list[str]:
        """The case's ops that changed (empty when nothing specific is known to have changed)."""
        if not self.known or self.everything or not self.keys:
            return []
        return sorted(op for op in ops if any(k in self.keys for k in op_keys(op)))


def changed_ops(old: dict[str, Any] | None, new: dict[str, Any] | None) -> Changed:
    if not old or not new or old.get("version") != new.get("version"):
        return Changed()
    if old.get("shared") != new.get("shared"):
        return Changed(everything=True, known=True)
    a, b = old.get("ops") or {}, new.get("ops") or {}
    return Changed(frozenset(k for k in set(a) | set(b) if a.get(k) != b.get(k)), known=True)


def op_keys(op: str) -> tuple[str, ...]:
    """The keys a fingerprint may be filed under for an overload (as the lowering table looks an
    op up): the overload, its packet, and the packet of its in-place variant's base op."""
    packet = op.rsplit(".", 1)[0] if op.count(".") >= 2 else op
    keys = [op, packet]
    if packet.endswith("_"):
        keys.append(packet[:-1])
    return tuple(keys)


# ----------------------------------------------------------------------------------- baseline


@dataclass
class BaselineFacts:
    """What ordering needs from the baseline: failing cases and models, and its fingerprints."""

    failing_cases: set[tuple[str, str]] = field(default_factory=set)
    failing_models: set[str] = field(default_factory=set)
    model_types: dict[str, str] = field(default_factory=dict)  # model id -> model type
    fingerprints: dict[str, Any] | None = None
    path: str | None = None


def load_baseline(path: str | Path | None) -> BaselineFacts | None:
    """The baseline's facts from its tables (a baseline dir, a run dir or a nightly dir); None when
    there is none. A damaged baseline orders like no baseline (ordering never fails a run)."""
    if path is None:
        return None
    import pyarrow.parquet as pq

    root = Path(path)
    dirs = (
        [root]
        if (root / "results.parquet").is_file()
        else sorted(d for d in root.iterdir() if (d / "results.parquet").is_file())
        if root.is_dir()
        else []
    )
    if not dirs:
        return None
    facts = BaselineFacts(path=str(root))
    try:
        for d in dirs:
            res = pq.read_table(
                d / "results.parquet", columns=["tier", "case_id", "status", "model_ids", "extra"]
            ).to_pylist()
            for r in res:
                extra = _json(r.get("extra"))
                for m in r.get("model_ids") or []:
                    if extra.get("model_type"):
                        facts.model_types.setdefault(m, str(extra["model_type"]))
                if r["status"] in FAILING_VALUES:
                    facts.failing_cases.add((r["tier"], r["case_id"]))
                    if r["tier"] != "unit":
                        facts.failing_models.update(r.get("model_ids") or [])
            if (d / "runs.parquet").is_file() and facts.fingerprints is None:
                for run in pq.read_table(d / "runs.parquet", columns=["extra"]).to_pylist():
                    fp = _json(run.get("extra")).get(FINGERPRINT_KEY)
                    if isinstance(fp, dict):
                        facts.fingerprints = fp
                        break
    except Exception as exc:  # noqa: BLE001 - a damaged baseline must not fail the run
        print(
            f"warning: baseline {root} cannot be read for ordering ({type(exc).__name__}: {exc}); "
            "cases run in listing order",
            file=sys.stderr,
        )
        return None
    return facts


def _json(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


# -------------------------------------------------------------------------------- op index


@dataclass
class OpIndex:
    """Which ops each model (and each model type) runs, from the shape registry's provenance."""

    by_model: dict[str, frozenset[str]] = field(default_factory=dict)
    by_type: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_registry(cls, path: str | Path | None, model_types: dict[str, str] | None = None) -> OpIndex:
        import pyarrow.parquet as pq

        p = Path(path) if path else registry_path()
        if not p.is_file():
            return cls()
        try:
            table = pq.read_table(p, columns=["op", "models"]).to_pydict()
        except Exception:  # noqa: BLE001 - no registry, no op knowledge (ordering degrades, never fails)
            return cls()
        by_model: dict[str, set[str]] = defaultdict(set)
        for op, models in zip(table["op"], table["models"]):
            for m in models or []:
                by_model[m].add(op)
        by_type: dict[str, set[str]] = defaultdict(set)
        for m, ops in by_model.items():
            mtype = (model_types or {}).get(m)
            if mtype:
                by_type[mtype].update(ops)
        return cls(
            {m: frozenset(o) for m, o in by_model.items()}, {t: frozenset(o) for t, o in by_type.items()}
        )

    def ops_of(self, case: Case) -> frozenset[str]:
        if isinstance(case.payload.get("op"), str):  # a unit case: its op
            return frozenset([case.payload["op"]])
        ops: set[str] = set()
        for m in case.model_ids:
            ops.update(self.by_model.get(m, ()))
        if not ops:
            mtype = (case.payload.get("spec") or {}).get("model_type")
            ops.update(self.by_type.get(mtype, ()))
        return frozenset(ops)


def registry_path() -> Path:
    """$HARNESS_REGISTRY, else the bundled registry (without importing the registry's torch code)."""
    from contracts.settings import current

    return current().registry or Path(str(resources.files("registry").joinpath("data/registry.parquet")))


def model_types_of(cases: Iterable[Case]) -> dict[str, str]:
    """Model id -> model type of the model cases being ordered (their specs say)."""
    out: dict[str, str] = {}
    for c in cases:
        mtype = (c.payload.get("spec") or {}).get("model_type")
        if mtype:
            for m in c.model_ids:
                out.setdefault(m, str(mtype))
    return out


# ----------------------------------------------------------------------------------- order


@dataclass
class Ordered:
    cases: list[Case]
    why: dict[str, dict[str, Any]]  # case id -> {"class": ..., "ops": [changed ops], ...}
    summary: dict[str, Any]


def order_cases(
    cases: list[Case], baseline: BaselineFacts | None, changed: Changed, index: OpIndex | None = None
) -> Ordered:
    """`cases` in execution order (the same cases; see the module docstring)."""
    index = index or OpIndex()
    why: dict[str, dict[str, Any]] = {}
    keyed = []
    for n, case in enumerate(cases):
        entry: dict[str, Any]
        failed = baseline is not None and (
            (case.tier, case.case_id) in baseline.failing_cases
            or any(m in baseline.failing_models for m in case.model_ids if case.tier != "unit")
        )
        if failed:
            entry = {"class": "baseline_failure"}
        else:
            touched = changed.touches(index.ops_of(case)) if changed.keys else []
            entry = {"class": "changed_op", "ops": touched[:10]} if touched else {"class": "rest"}
        why[case.case_id] = entry
        keyed.append((CLASSES.index(entry["class"]), -float(case.weight or 0.0), n, case))
    keyed.sort(key=lambda k: k[:3])
    counts = {c: sum(1 for w in why.values() if w["class"] == c) for c in CLASSES}
    summary = {
        "order": DEFAULT_ORDER,
        "classes": counts,
        "baseline": baseline.path if baseline else None,
        "fingerprints_compared": changed.known,
        "shared_path_changed": changed.everything,
        "changed_ops": sorted(changed.keys)[:200],
        "n_changed_ops": len(changed.keys),
    }
    return Ordered([k[3] for k in keyed], why, summary)


def execution_order(
    tier: str,
    todo: list[Case],
    opts: Any,
    run_dir: Path,
    fingerprints: dict[str, Any] | Callable[[], dict[str, Any] | None] | None,
    why: dict[str, dict[str, Any]] | None = None,
) -> list[Case]:
    """The runner's hook: `todo` in the order `opts.order` asks for; why, in order-<tier>.json (and
    in `why`, case id -> class, when given). `fingerprints` (this run's, or a callable that waits
    for them) is consulted only when the baseline has fingerprints to compare with."""
    if opts.order == "listed" or len(todo) < 2:
        return todo
    if opts.order not in ORDERS:
        raise ValueError(f"unknown order {opts.order!r}: use one of {', '.join(ORDERS)}")
    from contracts.settings import current

    path = opts.baseline or (current().baseline_dir if opts.use_baseline else None)
    baseline = load_baseline(path) if opts.use_baseline or opts.baseline else None
    if baseline is not None and baseline.fingerprints:
        changed = changed_ops(
            baseline.fingerprints, fingerprints() if callable(fingerprints) else fingerprints
        )
    else:
        changed = Changed()
    index = None
    if changed.keys and any(not isinstance(c.payload.get("op"), str) for c in todo):
        types = {**(baseline.model_types if baseline else {}), **model_types_of(todo)}
        index = OpIndex.from_registry(opts.registry if tier == "unit" else None, types)
    ordered = order_cases(todo, baseline, changed, index)
    _write_order(run_dir / f"order-{tier}.json", ordered)
    if why is not None:
        why.update(ordered.why)
    early = ordered.summary["classes"]
    if getattr(opts, "progress", False) and (early["baseline_failure"] or early["changed_op"]):
        print(
            f"{tier}: first {early['baseline_failure']} case(s) that failed in the baseline, then "
            f"{early['changed_op']} that run one of {ordered.summary['n_changed_ops']} changed op(s)",
            file=sys.stderr,
        )
    return ordered.cases


def _write_order(path: Path, ordered: Ordered) -> None:
    data = {
        "summary": ordered.summary,
        "cases": [{"case_id": c.case_id, **ordered.why[c.case_id]} for c in ordered.cases],
    }
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)
