"""Isolated worker processes: a hang, a segfault, an OOM or an exception is a row, never a dead run.

Why: models are untrusted code paths through C++ kernels; one that segfaults or loops forever
must not take the run down. Each `IsolatedWorker` owns one child process (`python -m
harness.engine.worker_process`, talking over a socketpair with multiprocessing's Connection framing) and
enforces, from the parent side:

- a timeout per case (the child is SIGKILLed -> status ``timeout``);
- a memory limit as a watchdog on the child's RSS (read from /proc; over it -> SIGKILL, ``oom``;
  optionally also RLIMIT_AS in the child, off by default because torch reserves far more
  address space than it uses). In the child, MemoryError / an allocator's out-of-memory error is
  reported as ``oom`` too; a SIGKILL nobody sent is the kernel's OOM killer -> ``oom``;
- death by a signal -> ``crash`` with the signal name (SIGSEGV, SIGABRT...) and the tail of the
  worker's log (faulthandler prints the Python stack there);
- an exception escaping the tier -> ``error`` with the exception class and message.

Workers are reused across cases (torch and transformers load once) and recycled after a crash,
a timeout, an OOM, or `max_cases` cases. A chunk of several cases (the unit tier) that dies is
re-run one case at a time so only the guilty case gets the bad row. Linux only (/proc, socketpair).

A case whose worker crashed or hung is run again alone under the call journal (a *diagnosed*
run: harness.engine.callmode in the child, harness.engine.calljournal read here): its death then
names the last op call entered, as the row's root cause (route ``call_journal``). While a
diagnosed case runs, a call that has not returned for `stall_seconds` with no other call entered
is a hang and the worker is killed at once; a spare worker starts beside it, so the next case
does not wait for a start-up. A case killed at a limit shorter than the tier's (a per-case limit,
harness.engine.limits) is re-run under the tier's: it is judged by its full limit, the shorter one
only makes a hang cheap.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts.records import Case, CaseOutcome
from contracts.rootcause import RootCause
from contracts.settings import DEFAULT_STARTUP_TIMEOUT, DEFAULT_WORKER_MEMORY, current, resolve_limits
from contracts.status import Status
from contracts.tiers import failure_outcome, load_tier
from harness.engine import calljournal
from harness.engine.worker_process import short
from harness.errors import WorkerDied

if TYPE_CHECKING:
    from harness.engine.executors.base import Plan

_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class WorkerLimits:
    timeout: float | None = (
        None  # seconds per case (None: the tier's, else the default); a chunk gets the same
    )
    memory_bytes: int | None = DEFAULT_WORKER_MEMORY  # RSS watchdog; None = no limit
    address_space_bytes: int | None = None  # RLIMIT_AS in the child; None = off
    max_cases: int | None = (
        None  # recycle the process after this many cases (None: the tier's, else the default)
    )
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT  # spawn + tier.setup (imports torch, transformers)
    poll_interval: float = 0.05
    # a diagnosed case: a call running this long with no other entered is a hang (None: the settings')
    stall_seconds: float | None = None
    diagnose: bool | None = None  # re-run a dead case under the call journal (None: the settings')


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class IsolatedWorker:
    """One reusable child process running cases of one tier on one backend."""

    def __init__(
        self,
        tier_ref: str,
        backend: str,
        limits: WorkerLimits | None = None,
        log_dir: str | os.PathLike | None = None,
        sys_path: list[str] | None = None,
        name: str = "w0",
        threads: int | None = None,
        fingerprints: bool = False,
    ) -> None:
        self.tier_ref, self.backend = tier_ref, backend
        # ask the child for the backend's op fingerprints once it is set up (harness.engine.ordering): the
        # worker has imported the device anyway, so no second process imports it to probe them
        self.want_fingerprints = fingerprints
        self.fingerprints: dict[str, Any] | None = None
        self.threads = threads  # intra-op threads of the child (OMP/MKL/torch); None: library default
        limits = limits or WorkerLimits()
        timeout, max_cases = resolve_limits(None, limits.timeout, limits.max_cases)
        settings = current()
        self.limits = replace(
            limits,
            timeout=timeout,
            max_cases=max_cases,
            stall_seconds=settings.stall_seconds if limits.stall_seconds is None else limits.stall_seconds,
            diagnose=settings.call_journal if limits.diagnose is None else limits.diagnose,
        )
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "harness-workers"
        self.sys_path = list(sys_path if sys_path is not None else sys.path)
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.log_path: Path | None = None
        self.cases_in_process = 0
        self.starts = 0
        self._stages: tuple[str, ...] | None = None
        self._spare: IsolatedWorker | None = None  # started beside a case that may kill this one
        self.spares = 0

    # -- lifecycle -------------------------------------------------------------------------
    def _start(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None and spare.proc is not None and spare.proc.poll() is None:
            self._adopt(spare)
            try:
                self._await_ready()
                return
            except (RuntimeError, WorkerDied):  # the spare did not make it: a fresh start
                self._kill()
        elif spare is not None:
            spare.close()
        self._spawn()
        self._await_ready()

    def _adopt(self, spare: IsolatedWorker) -> None:
        """Take over a spare's process (started earlier, beside a case that could kill ours)."""
        self.proc, self.conn, self.log_path = spare.proc, spare.conn, spare.log_path
        self._spawned_at, self._ready, self._prestarted = spare._spawned_at, False, True
        self.cases_in_process = 0
        self.starts += 1
        spare.proc = spare.conn = None

    def _spare_up(self) -> None:
        """Start a spare process now, so that if this case kills ours the next one need not wait."""
        if self._spare is None:
            self.spares += 1
            self._spare = IsolatedWorker(
                self.tier_ref,
                self.backend,
                self.limits,
                log_dir=self.log_dir,
                sys_path=self.sys_path,
                name=f"{self.name}-spare{self.spares}",
                threads=self.threads,
            )
            self._spare.prestart()

    def prestart(self) -> None:
        """Spawn the child now and let it import and set up while the caller does other work
        (the runner lists the tier meanwhile); the first chunk then waits only for what is left."""
        if self.proc is None:
            self._spawn()
            self._prestarted = True

    def _spawn(self) -> None:
        self._spawned_at = time.monotonic()
        self._ready = False
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.log_path = self.log_dir / f"worker-{self.name}-{self.starts}-{os.getpid()}.log"
        parent_sock, child_sock = socket.socketpair()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.engine.worker_process", str(child_sock.fileno())],
                pass_fds=[child_sock.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self._child_env(),
            )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.cases_in_process = 0
        init = {
            "tier": self.tier_ref,
            "backend": self.backend,
            "sys_path": self.sys_path,
            "address_space_bytes": self.limits.address_space_bytes,
            "fingerprints": self.want_fingerprints and self.fingerprints is None,
        }
        self.conn.send(("init", init))

    def _await_ready(self) -> None:
        needed = time.monotonic()
        msg = self._wait(needed + self.limits.startup_timeout, starting=True)
        if msg[0] == "fatal":
            self._kill()
            raise RuntimeError(f"worker for tier {self.tier_ref!r} failed to start: {msg[1]}")
        self._stages = tuple(msg[2])
        if len(msg) > 3 and isinstance(msg[3], dict):
            self.fingerprints = msg[3]
        self._ready = True
        # spawn -> ready (interpreter, imports, tier.setup): journaled with the next outcome, with
        # the part that ran before the worker was needed (beside the listing: no wait for it)
        self._startup_seconds = round(time.monotonic() - self._spawned_at, 3)
        self._startup_overlapped = round(max(0.0, needed - self._spawned_at), 3) if self._prestarted else 0.0
        self._prestarted = False

    def _child_env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        if self.threads:  # N workers share the cores instead of each spinning up a thread per core
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env[var] = str(self.threads)
        return env

    def stages(self) -> tuple[str, ...]:
        if self._stages is None:
            if self.proc is not None and self.proc.poll() is None and not self._ready:
                self._await_ready()  # pre-started
            else:
                self._start()
        return self._stages  # type: ignore[return-value]

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
                pass
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def kill(self) -> None:
        """Kill the child and any spare at once (Ctrl-C)."""
        self._kill()
        if self._spare is not None:
            self._spare._kill()
            self._spare = None

    def close(self) -> None:
        """Stop the child (and any spare) politely, then firmly."""
        if self._spare is not None:
            self._spare.close()
            self._spare = None
        if self.proc is not None and self.proc.poll() is None and self.conn is not None:
            try:
                self.conn.send(("stop",))
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired, BrokenPipeError):
                pass
        self._kill()

    # -- waiting ---------------------------------------------------------------------------
    def _log_tail(self, lines: int = 6) -> str:
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def _died(self, killed_for: str | None = None, stuck: dict[str, Any] | None = None) -> WorkerDied:
        """Make sure the child is gone and explain why it went (`killed_for`: what we killed it for;
        `stuck`: the journal entry of the call a stalled case was stuck in)."""
        assert self.proc is not None
        ran = round(time.monotonic() - self._began, 3) if self._began else 0.0
        if killed_for is None and self.proc.poll() is None:
            try:  # the pipe closes a moment before the exit status is there
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                killed_for = "lost"  # the pipe broke but the process lives: treat as a crash
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            rc = None
        tail = self._log_tail()
        self._kill()
        if killed_for == "timeout":
            return WorkerDied(
                Status.TIMEOUT,
                "worker_timeout",
                "Timeout",
                f"no result within {self._deadline_s:.0f}s; worker killed",
                seconds=self._deadline_s,
            )
        if killed_for == "stall":
            op = (stuck or {}).get("op", "an op call")
            return WorkerDied(
                Status.TIMEOUT,
                "worker_stalled",
                "Timeout",
                f"{op} did not return within {self.limits.stall_seconds:.0f}s and no other call was "
                "entered; worker killed",
                seconds=ran,
            )
        if killed_for == "oom":
            return WorkerDied(
                Status.OOM,
                "worker_memory_limit",
                "MemoryLimit",
                f"worker RSS exceeded the limit of {self.limits.memory_bytes} bytes; worker killed",
                seconds=ran,
            )
        if killed_for == "lost":
            return WorkerDied(
                Status.CRASH,
                "worker_lost",
                "WorkerLost",
                short(f"the worker stopped answering. {tail}"),
                seconds=ran,
            )
        if rc is not None and rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = f"SIG{-rc}"
            if sig == "SIGKILL":  # nobody here sent it: the kernel's OOM killer, or an operator
                return WorkerDied(
                    Status.OOM,
                    "worker_killed:SIGKILL",
                    "SIGKILL",
                    short(f"worker killed by SIGKILL (likely the kernel OOM killer). {tail}"),
                    seconds=ran,
                )
            return WorkerDied(
                Status.CRASH,
                f"worker_crash:{sig}",
                sig,
                short(f"worker died of {sig}. {tail}"),
                seconds=ran,
            )
        return WorkerDied(
            Status.CRASH,
            f"worker_exit:{rc}",
            "WorkerExit",
            short(f"worker exited with code {rc} during the case. {tail}"),
            seconds=ran,
        )

    def _wait(self, deadline: float, starting: bool = False, journal: Path | None = None) -> tuple:
        """Next message from the child, enforcing deadline, liveness, the memory watchdog and, for a
        diagnosed case (`journal`), the stall watch."""
        assert self.proc is not None and self.conn is not None
        limit = self.limits.memory_bytes
        watched = time.monotonic()
        while True:
            try:
                if self.conn.poll(self.limits.poll_interval):
                    return self.conn.recv()
            except (EOFError, OSError):
                raise self._died() from None
            if self.proc.poll() is not None:
                raise self._died()
            # memory first: a worker over its limit when the deadline passes (the watchdog itself
            # was starved of CPU, as on a loaded machine) is out of memory, not merely slow
            if limit and rss_bytes(self.proc.pid) > limit:
                raise self._died("oom")
            now = time.monotonic()
            if journal is not None and self._began and now - watched >= _STALL_POLL:
                watched = now
                stuck = calljournal.stalled(journal, float(self.limits.stall_seconds or 0) or float("inf"))
                if stuck is not None:
                    raise self._died("stall", stuck)
            if now > deadline:
                self._deadline_s = self.limits.startup_timeout if starting else self._deadline_s
                raise self._died("timeout")

    def _ensure_started(self) -> None:
        if self.proc is None or self.proc.poll() is not None or not self._ready:
            if self.proc is not None and self.proc.poll() is None:  # pre-started, not ready yet
                self._await_ready()
            else:
                if self.proc is not None:
                    self._kill()
                self._start()

    def _exchange(
        self, cases: list[Case], many: bool, limit: float, journal: Path | None, land: Callable
    ) -> None:
        """Send cases to the child and land what it answers until it is idle. A death raises
        WorkerDied, with the ids then in flight in `self.inflight`. `journal`: run them under the
        call journal at that path, with the stall watch."""
        options = {"journal": str(journal)} if journal is not None else {}
        self.conn.send(("run", [asdict(c) for c in cases], many, options))
        self.inflight = []
        self._began = 0.0
        while True:
            if self.inflight:
                msg = self._wait(self._deadline, journal=journal)
            else:
                msg = self._wait(time.monotonic() + 60.0 + limit)
            if msg[0] == "begin":
                self.inflight = list(msg[1])
                self._deadline_s = limit  # a chunk gets one limit (the tier's, or what it costs)
                self._began = time.monotonic()
                self._deadline = self._began + limit
            elif msg[0] == "results":
                outs = []
                for d in msg[1]:
                    out = CaseOutcome.from_dict(d)
                    out.worker.update({"pid": self.proc.pid, "worker": self.name})
                    if self._startup_seconds is not None:
                        out.worker["startup_seconds"] = self._startup_seconds
                        if self._startup_overlapped:
                            out.worker["startup_overlapped_seconds"] = self._startup_overlapped
                        self._startup_seconds = None
                    outs.append(out)
                land(outs)
                self.cases_in_process += len(msg[1])
                self.inflight = []
                self._began = 0.0
            elif msg[0] == "idle":
                return

    # -- running ---------------------------------------------------------------------------
    def run_chunk(
        self,
        cases: list[Case],
        many: bool = False,
        emit: Callable[[list[CaseOutcome]], None] | None = None,
        timeout: float | None = None,
        diagnose: bool = False,
        case_timeouts: dict[str, float] | None = None,
        plan: Plan | None = None,
        spare: bool = False,
    ) -> list[CaseOutcome]:
        """Run cases in the child; always returns one outcome per case, in order. `emit`, when
        given, gets each outcome once, as soon as it is known: a chunk that died is re-run case by
        case, and the guilty case's row (a timeout, a crash) lands before the rest re-run, not
        after the whole chunk (fail-fast stops on it a chunk's re-run earlier). `timeout` is the
        chunk's limit (None: the worker's), `case_timeouts` each case's own for its re-run alone
        (as `plan` has it then: harness.engine.limits); `diagnose` runs each case alone under the
        call journal, `spare` starts a spare process beside them (they are expected to die)."""
        results: dict[str, CaseOutcome] = {}
        emitted: set[str] = set()
        limit = float(timeout or self.limits.timeout)
        own = case_timeouts or {}

        def land(outs: list[CaseOutcome]) -> None:
            for out in outs:
                results[out.case_id] = out
            fresh = [o for o in outs if o.case_id not in emitted]
            emitted.update(o.case_id for o in fresh)
            if emit is not None and fresh:
                emit(fresh)

        if diagnose and self.limits.diagnose:
            for c in cases:
                land([self._diagnosed(c, own.get(c.case_id) or limit, spare=spare)])
            return self._finish(cases, results)
        pending = list(cases)
        while pending:
            try:
                self._ensure_started()
            except WorkerDied as died:  # the child cannot even start: every case gets the row
                land([self._failed(c, died) for c in pending])
                break
            batch_many = many and len(pending) > 1
            try:
                self._exchange(pending, batch_many, limit, None, land)
                pending = [c for c in pending if c.case_id not in results]
            except WorkerDied as died:
                pending = [c for c in pending if c.case_id not in results]
                guilty = [c for c in pending if c.case_id in self.inflight] or pending[:1]
                if len(guilty) > 1:  # a chunk died: rerun its cases one by one to find the guilty one
                    if self.limits.diagnose:
                        self._spare_up()  # one of them will die again
                    for c in guilty:
                        case_limit = own.get(c.case_id) or limit
                        if plan is not None:  # what the re-runs before it taught the run
                            case_limit = plan.case_limit(c, case_limit)
                        if self.limits.diagnose:
                            land([self._diagnosed(c, case_limit)])
                        else:
                            land(self.run_chunk([c], many=False, emit=land, timeout=case_limit))
                else:
                    land([self._after_death(guilty[0], died, limit)])
                pending = [c for c in pending if c.case_id not in results]
            except (BrokenPipeError, ConnectionError):
                self._kill()
        return self._finish(cases, results)

    def _finish(self, cases: list[Case], results: dict[str, CaseOutcome]) -> list[CaseOutcome]:
        if self.proc is not None and self.cases_in_process >= self.limits.max_cases:
            self.close()  # recycle: the next chunk starts a fresh process
        return [results[c.case_id] for c in cases]

    def _after_death(self, case: Case, died: WorkerDied, limit: float) -> CaseOutcome:
        """A case that died alone, unjournaled: run it again under the call journal to learn where
        (a crash or a hang; an OOM is not re-run). Killed at a limit shorter than the tier's, it gets
        the tier's: the shorter limit is a guess from what the case cost before."""
        if not self.limits.diagnose or died.status not in (Status.CRASH, Status.TIMEOUT):
            return self._failed(case, died)
        again = (
            self.limits.timeout if died.status == Status.TIMEOUT and limit < self.limits.timeout else limit
        )
        return self._diagnosed(case, again, first=died, first_limit=limit)

    def _diagnosed(
        self,
        case: Case,
        limit: float,
        first: WorkerDied | None = None,
        first_limit: float | None = None,
        spare: bool = True,
    ) -> CaseOutcome:
        """Run one case alone under the call journal; a death gets its root cause from the journal.
        `first`: how the case died before, unjournaled (under `first_limit`). `spare`: start a
        spare process beside it (a case that died once, or of a marked op, is expected to die)."""
        journal = self.log_dir / f"calls-{self.name}.journal"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        got: list[CaseOutcome] = []
        t0 = time.monotonic()
        if spare:
            self._spare_up()
        try:
            self._ensure_started()
            if spare:
                self._spare_up()  # the spare took the place of a dead process: the next one starts now
            self._exchange([case], False, limit, journal, got.extend)
        except WorkerDied as died:
            return self._journaled_death(
                case, died, limit, journal, time.monotonic() - t0, first, first_limit
            )
        except (BrokenPipeError, ConnectionError):
            self._kill()
        finally:
            with contextlib.suppress(OSError):
                journal.unlink()
        if not got:  # the pipe broke without an exit status: nothing ran to completion
            return self._failed(case, first or WorkerDied(Status.CRASH, "worker_lost", "WorkerLost", ""))
        out = got[0]
        out.worker["diagnosed"] = True
        if first is None:
            return out
        before = {"died": first.reason, "message": first.message, "limit": first_limit}
        if first.status == Status.TIMEOUT and (first_limit or 0) < self.limits.timeout:
            out.worker["first_attempt"] = before  # the per-case limit was too short, not the case too slow
            return out
        kind = _KIND[first.status]
        why = (
            f"the case did not {'crash' if kind == 'crash' else 'hang'} again when re-run alone under the "
            f"call journal (the re-run ended {out.status}): the first death cannot be pinned on a call"
        )
        failed = self._failed(case, first, calljournal.not_found(why, kind, time.monotonic() - t0))
        failed.worker["rerun"] = {"status": out.status, "seconds": out.seconds}
        return failed

    def _journaled_death(
        self,
        case: Case,
        died: WorkerDied,
        limit: float,
        journal: Path,
        seconds: float,
        first: WorkerDied | None,
        first_limit: float | None,
    ) -> CaseOutcome:
        kind = _KIND.get(died.status)
        if kind is None:  # out of memory: not a crash or hang of a call
            return self._failed(case, died)
        entries = calljournal.read_calls(journal)
        how = _HOW.get(died.reason.split(":")[0], "died") if kind == "hang" else f"died ({died.error_class})"
        rc = calljournal.root_cause(entries, kind, how, seconds)
        if (
            died.reason == "worker_timeout"
            and limit < self.limits.timeout
            and not self._hung_long(entries, limit)
        ):
            # killed at a per-case limit with no call stuck for long: judge it under the tier's
            again = self._diagnosed(case, self.limits.timeout, first=first or died, first_limit=limit)
            return again
        out = self._failed(case, died, rc)
        if first is not None:
            out.worker["first_attempt"] = {"died": first.reason, "limit": first_limit}
        return out

    def _hung_long(self, entries: list[dict[str, Any]], limit: float) -> bool:
        """Did the open call run for the stall time, or half the case's limit, before the kill?"""
        pending = calljournal.open_calls(entries)
        if not pending:
            return False
        age = time.time() - float(pending[-1].get("t", time.time()))
        return age >= min(float(self.limits.stall_seconds or limit), limit / 2)

    def _failed(self, case: Case, died: WorkerDied, root_cause: RootCause | None = None) -> CaseOutcome:
        stages = self._stages
        if stages is None:  # the child died before telling us: ask the tier in this process
            try:
                stages = tuple(load_tier(self.tier_ref).stages)
            except Exception:  # noqa: BLE001
                stages = ("case",)
        out = failure_outcome(
            case,
            stages,
            died.status,
            died.reason,
            died.error_class,
            died.message,
            seconds=died.seconds if died.status == Status.TIMEOUT else 0.0,
        )
        out.worker.update({"worker": self.name, "died": died.reason})
        if root_cause is not None:
            record = root_cause.to_dict()
            for st in out.stages:  # which stage was running is not known: each row carries it
                st["root_cause"] = record
        return out

    _deadline = 0.0
    _deadline_s = 0.0
    _began = 0.0
    inflight: tuple[str, ...] | list[str] = ()
    _startup_seconds: float | None = None
    _startup_overlapped = 0.0
    _spawned_at = 0.0
    _ready = False
    _prestarted = False


#: seconds between two reads of a diagnosed case's journal for the stall watch
_STALL_POLL = 0.5
_KIND = {Status.CRASH: "crash", Status.TIMEOUT: "hang"}
_HOW = {"worker_timeout": "was killed at its time limit", "worker_stalled": "stalled"}
