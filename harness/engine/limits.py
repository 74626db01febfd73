"""How long a case may run, and which cases run alone: limits that follow what a case costs.

Why: a tier's limit is sized for its slowest case (a unit chunk of 64 ops gets 120 s, a
representative model 900 s), so a hang held a worker for that long even where the case takes
milliseconds, and a chunk holding it was then re-run case by case, each hanging case waiting the
full limit again. Here every chunk gets what its cases cost in the baseline:

    limit = min(tier limit, max(floor, factor x the cases' baseline seconds))

(a chunk whose case the baseline does not know, or where it did not finish, keeps the tier's
limit). A case killed at such a limit is not judged by it: the worker re-runs it alone under the
tier's limit with the call journal (harness.engine.workers), so a slow night costs a re-run,
never a false row.

Once a worker died in an op (its call journal's root cause, kind hang or crash), the op is
*marked*: later cases labeled with it (unit and upstream cases name their op) run alone, under
the call journal, with a spare worker starting beside them (they will likely kill theirs), and a
hang's under the short `marked_op_limit`. Once any op is marked, every later model case (no op
label) runs under the journal too, so a hang is cut short by the journal's stall watch
(HARNESS_STALL_SECONDS) and a death names its op at once, without a second run; one whose recorded
ops (the shape registry's provenance, harness.engine.ordering.OpIndex) include a marked op gets a
spare worker as well.
Marks also come from the baseline's own hang and crash root causes and, in a nightly, from the
tiers before. Labeled cases whose op changed since the baseline (the ordering's `changed_op`)
run alone under the journal from the start. Nothing is keyed on an op's name: an op is matched by
its overload, its packet and the packet's last name (``aten.topk.default`` ~ ``topk``, an
OpInfo's ``nn.functional.gelu`` ~ ``aten.gelu.default``).

All numbers are settings (contracts.settings): HARNESS_CASE_LIMIT_FACTOR, HARNESS_CASE_LIMIT_FLOOR,
HARNESS_MARKED_OP_LIMIT, HARNESS_STALL_SECONDS, HARNESS_CALL_JOURNAL.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.records import Case, CaseOutcome
from contracts.status import Status
from harness.engine.chunks import chunk_cases
from harness.engine.executors.base import Chunk

#: statuses whose recorded seconds are a limit, not what the case costs
_DIED = frozenset({Status.TIMEOUT.value, Status.CRASH.value, Status.OOM.value})
#: root-cause kinds that mark an op
MARKING_KINDS = ("hang", "crash")


@dataclass(frozen=True)
class LimitSettings:
    factor: float = 3.0
    floor: float = 30.0
    marked: float = 5.0
    stall: float = 10.0
    journal: bool = True
    #: added to a model case's limit in a tier that localizes (`localizes`, contracts.tiers): a failing
    #: row is localized inside the case (harness.rootcause, HARNESS_ROOT_CAUSE_SECONDS), which its
    #: baseline seconds, measured while it passed, do not hold
    localize: float = 180.0

    @classmethod
    def current(cls) -> LimitSettings:
        from contracts.settings import current

        s = current()
        return cls(
            factor=s.case_limit_factor,
            floor=s.case_limit_floor,
            marked=s.marked_op_limit,
            stall=s.stall_seconds,
            journal=s.call_journal,
            localize=s.root_cause_seconds if s.root_cause else 0.0,
        )


# --------------------------------------------------------------------------------- op labels


def op_keys(name: str) -> frozenset[str]:
    """The names an op goes by: an overload ``aten.topk.default`` -> itself, ``aten.topk``,
    ``topk``; an OpInfo name ``nn.functional.gelu`` -> itself, ``gelu``."""
    name = str(name or "").strip()
    if not name:
        return frozenset()
    keys = {name}
    parts = name.split(".")
    if parts[0] in ("aten", "prims") and len(parts) >= 3:  # namespace.packet.overload
        keys.add(".".join(parts[:2]))
        keys.add(parts[1])
    else:
        keys.add(parts[-1])
    return frozenset(k for k in keys if k)


def case_label(case: Case) -> str:
    """The op a case is labeled with ("" for a model case): a unit case's `op`, an upstream case's
    OpInfo name (`info.op`)."""
    payload = case.payload or {}
    if isinstance(payload.get("op"), str):
        return payload["op"]
    info = payload.get("info")
    if isinstance(info, dict) and isinstance(info.get("op"), str):
        return info["op"]
    return ""


# ------------------------------------------------------------------------------- baseline


@dataclass
class BaselineCosts:
    """What the baseline says about a tier's cases: seconds of those that finished, and the ops
    its dead rows were localized to."""

    seconds: dict[str, float] = field(default_factory=dict)
    marks: dict[str, str] = field(default_factory=dict)  # op -> hang | crash
    path: str | None = None


def baseline_costs(path: str | Path | None, tier: str) -> BaselineCosts:
    """Per-case seconds (the sum over the case's rows) of the cases of `tier` that finished in the
    baseline (a baseline, run or nightly directory). A damaged or missing baseline knows nothing
    (every case keeps the tier's limit); it never fails a run."""
    if not path:
        return BaselineCosts()
    root = Path(path)
    files = (
        [root / "results.parquet"]
        if (root / "results.parquet").is_file()
        else sorted(root.glob("*/results.parquet"))
        if root.is_dir()
        else []
    )
    costs = BaselineCosts(path=str(root))
    try:
        import pyarrow.parquet as pq

        for f in files:
            names = set(pq.read_schema(f).names)
            cols = [c for c in ("tier", "case_id", "status", "seconds", "root_cause") if c in names]
            if not {"tier", "case_id", "status", "seconds"} <= set(cols):
                continue
            table = pq.read_table(f, columns=cols, filters=[("tier", "=", tier)]).to_pylist()
            total: Counter[str] = Counter()
            dead: set[str] = set()
            for r in table:
                total[r["case_id"]] += float(r.get("seconds") or 0.0)
                if r["status"] in _DIED:
                    dead.add(r["case_id"])
                    _mark_from(r.get("root_cause"), costs.marks)
            costs.seconds.update({c: s for c, s in total.items() if c not in dead})
    except Exception as exc:  # noqa: BLE001 - a damaged baseline must not fail the run
        print(
            f"warning: baseline {root} cannot be read for case limits ({type(exc).__name__}: {exc}); "
            "every case keeps the tier's limit",
            file=sys.stderr,
        )
        return BaselineCosts(path=str(root))
    return costs


def _mark_from(record: Any, marks: dict[str, str]) -> None:
    if isinstance(record, str):
        try:
            record = json.loads(record)
        except ValueError:
            return
    if isinstance(record, dict) and record.get("found") and record.get("kind") in MARKING_KINDS:
        if record.get("op"):
            marks.setdefault(str(record["op"]), str(record["kind"]))


def marks_of(outcome: CaseOutcome) -> dict[str, str]:
    """The ops a dead outcome's rows were localized to (op -> hang | crash)."""
    marks: dict[str, str] = {}
    for st in outcome.stages:
        _mark_from(st.get("root_cause"), marks)
    return marks


# ------------------------------------------------------------------------------- schedule


class Schedule:
    """A run's limits and marks (see the module docstring); the executors ask it to `refine` each
    chunk as they dispatch it, the runner tells it each outcome (`observe`). Thread-safe."""

    def __init__(
        self,
        tier_limit: float,
        costs: BaselineCosts | None = None,
        settings: LimitSettings | None = None,
        marks: dict[str, str] | None = None,
        suspects: Iterable[str] = (),
        ops_of: Callable[[Case], frozenset[str]] | None = None,
    ) -> None:
        self.tier_limit = float(tier_limit)
        self.costs = costs or BaselineCosts()
        self.settings = settings or LimitSettings()
        self.marks: dict[str, str] = dict(marks or {})
        self.suspects = frozenset(suspects)
        self._ops_of = ops_of
        self._keys: dict[str, str] = {}
        for op, kind in self.marks.items():
            self._index(op, kind)
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    # ------------------------------------------------------------------ limits

    def limit(self, case: Case) -> float:
        """The case's own limit: its baseline cost times the factor, at least the floor, at most the
        tier's; the tier's when the baseline does not know the case."""
        seconds = self.costs.seconds.get(case.case_id)
        if seconds is None:
            return self.tier_limit
        return min(
            self.tier_limit,
            max(self.settings.floor, self.settings.factor * seconds) + self._allowance([case]),
        )

    def chunk_limit(self, cases: list[Case]) -> float:
        known = [self.costs.seconds.get(c.case_id) for c in cases]
        if not cases or any(s is None for s in known):
            return self.tier_limit
        limit = max(self.settings.floor, self.settings.factor * sum(known)) + self._allowance(cases)
        return min(self.tier_limit, limit)

    def _allowance(self, cases: list[Case]) -> float:
        """Time to localize a failure inside each model case (op cases are one call: nothing to localize)."""
        return self.settings.localize * sum(1 for c in cases if not case_label(c))

    def plan(self, todo: list[Case], size: int) -> list[Chunk]:
        """`todo` (in execution order) cut into chunks (harness.engine.chunks), each with its limit."""
        return [self.make_chunk(cases, size > 1) for cases in chunk_cases(todo, size)]

    def make_chunk(self, cases: list[Case], many: bool) -> Chunk:
        return Chunk(
            cases,
            many,
            timeout=self.chunk_limit(cases),
            case_timeouts={c.case_id: self.limit(c) for c in cases},
        )

    # ------------------------------------------------------------------ marks

    def _index(self, op: str, kind: str) -> None:
        for key in op_keys(op):
            if key not in self._keys or kind == "hang":  # a hang's limit is the stricter
                self._keys[key] = kind

    def mark(self, op: str, kind: str, label: str = "") -> bool:
        """Mark an op (and the label of the case that died in it); True when it is new."""
        with self._lock:
            new = op not in self.marks
            self.marks.setdefault(op, kind)
            self._index(op, kind)
            if label:
                self._index(label, kind)
            return new

    def marked(self, case: Case) -> str | None:
        """hang | crash when the case is labeled with a marked op, else None."""
        label = case_label(case)
        if not label or not self._keys:
            return None
        kinds = {self._keys[k] for k in op_keys(label) if k in self._keys}
        return "hang" if "hang" in kinds else kinds.pop() if kinds else None

    def runs_marked_op(self, case: Case) -> bool:
        """A model case whose recorded ops include a marked op."""
        if case_label(case) or not self._keys or self._ops_of is None:
            return False
        return any(k in self._keys for op in self._ops_of(case) for k in op_keys(op))

    def observe(self, outcomes: Iterable[CaseOutcome], cases: dict[str, Case] | None = None) -> None:
        """Learn marks from outcomes whose worker died in an op."""
        for out in outcomes:
            for op, kind in marks_of(out).items():
                case = (cases or {}).get(out.case_id)
                self.mark(op, kind, case_label(case) if case is not None else "")

    # ------------------------------------------------------------------ dispatch

    def refine(self, chunk: Chunk) -> list[Chunk]:
        """The chunk as it runs now: cases of marked ops (and suspects) alone under the journal; a
        hang's labeled cases under the short limit."""
        if not self.settings.journal or chunk.diagnose:
            return [chunk]
        alone, rest = [], []
        for case in chunk.cases:
            kind = self.marked(case)
            limit = (chunk.case_timeouts or {}).get(case.case_id) or self.limit(case)
            if kind == "hang":
                alone.append((case, min(limit, self.settings.marked), "marked_hang"))
            elif kind == "crash":
                alone.append((case, limit, "marked_crash"))
            elif case.case_id in self.suspects and case_label(case):
                alone.append((case, limit, "changed_op"))
            elif self.runs_marked_op(case):
                alone.append((case, limit, "runs_marked_op"))
            elif self._keys and not case_label(case):
                alone.append((case, limit, "after_a_death"))
            else:
                rest.append(case)
        if not alone:
            return [chunk]
        with self._lock:
            self.counts.update(why for _, _, why in alone)
        out = [self.make_chunk(rest, chunk.many and len(rest) > 1)] if rest else []
        out += [
            Chunk(
                [case],
                False,
                timeout=limit,
                diagnose=True,
                case_timeouts={case.case_id: limit},
                spare=why not in ("changed_op", "after_a_death"),  # a marked op killed a worker before
            )
            for case, limit, why in alone
        ]
        return out

    def case_limit(self, case: Case, planned: float) -> float:
        """The limit of a case a dead chunk re-runs alone: a hang's labeled case gets the short one
        (a chunk holding several cases of an op that hangs learns it at the first)."""
        if self.settings.journal and self.marked(case) == "hang":
            with self._lock:
                self.counts["marked_hang"] += 1
            return min(planned, self.settings.marked)
        return planned

    def summary(self) -> dict[str, Any]:
        """For run.json: the settings, how many cases the baseline knew, the marks and why cases ran
        alone."""
        s = self.settings
        return {
            "tier_limit": self.tier_limit,
            "factor": s.factor,
            "floor": s.floor,
            "marked_op_limit": s.marked,
            "stall_seconds": s.stall,
            "call_journal": s.journal,
            "baseline": self.costs.path,
            "baseline_cases": len(self.costs.seconds),
            "marked_ops": dict(sorted(self.marks.items())),
            "alone": dict(sorted(self.counts.items())),
        }
