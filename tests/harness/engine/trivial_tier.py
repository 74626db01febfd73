"""A test-only tier of trivial cases, selected with `--tier tests.harness.engine.trivial_tier:TIER`.

Each case's payload names an action the worker performs: pass, fail, raise, memerror, timeouterror,
segv, hang, oom (allocate until the memory watchdog kills the worker), exit, sleep:SECONDS, env (report
the worker's thread variables as metrics), phase:NAME (pass inside a contracts.timing phase),
device:ACTION (ACTION on a device, pass on the cpu reference). The case list is a JSON file given
as `--models FILE` ([{"id": ..., "action": ...}, ...]); without it, DEFAULT_CASES.
It imports nothing heavy so worker processes start in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time

from contracts.records import Case, StageResult
from contracts.status import Status

DEFAULT_CASES = [{"id": f"ok-{i}", "action": "pass"} for i in range(6)]


def _act(action: str, backend: str = "cpu") -> list[StageResult]:
    if action.startswith("device:"):  # a device-only failure: ACTION on any backend but the cpu reference
        return _act("pass" if backend == "cpu" else action.split(":", 1)[1], backend)
    if action == "pass":
        return [StageResult("run", Status.PASS, seconds=0.001), StageResult("check", Status.PASS)]
    if action == "fail":
        return [StageResult("run", Status.PASS), StageResult("check", Status.FAIL, reason="mismatch")]
    if action == "raise":
        raise ValueError("planted failure")
    if action == "memerror":
        raise MemoryError("planted allocation failure")
    if action == "timeouterror":
        raise TimeoutError("planted: the op waited too long")
    if action == "env":  # what the worker process was started with
        threads = {
            v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
        }
        return [StageResult("run", Status.PASS, metrics=threads), StageResult("check", Status.PASS)]
    if action == "segv":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        os.kill(os.getpid(), signal.SIGSEGV)
    if action == "hang":
        time.sleep(3600)
    if action == "oom":
        hog = []
        while True:
            hog.append(b"\x01" * (32 << 20))
            time.sleep(0.005)
    if action == "exit":
        os._exit(3)
    if action.startswith("phase:"):  # pass, inside the timed phase NAME (contracts.timing)
        from contracts.timing import phase

        with phase(action.split(":", 1)[1]):
            return _act("pass")
    if action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))
        return _act("pass")
    raise KeyError(f"unknown action {action!r}")


class TrivialTier:
    name = "trivial"
    stages = ("run", "check")
    chunk_size = 1

    def cases(self, inputs) -> list[Case]:
        specs = DEFAULT_CASES
        if inputs.models:
            with open(inputs.models) as fh:
                specs = json.load(fh)
        return [
            Case(
                case_id=s["id"],
                tier=self.name,
                payload={"action": s["action"]},
                model_ids=[s["id"]],
                weight=float(s.get("downloads", 1)),
            )
            for s in specs
        ]

    def execute(self, case: Case, backend: str) -> list[StageResult]:
        return _act(case.payload["action"], backend)


class ChunkedTier(TrivialTier):
    """Same cases, sent to workers in chunks of 4 through execute_many (like the unit tier)."""

    name = "trivial_chunked"
    chunk_size = 4

    def execute_many(self, cases: list[Case], backend: str) -> list[list[StageResult]]:
        return [_act(c.payload["action"], backend) for c in cases]


class PrestartTier(TrivialTier):
    """Its workers' setup writes their pid into $TRIVIAL_SETUP_DIR; its listing waits (up to a
    minute) until $TRIVIAL_EXPECT_WORKERS of them have, so it lists only if the workers were started
    before the listing finished ($TRIVIAL_LISTING_FAILS: the listing then raises)."""

    name = "trivial_prestart"

    def setup(self, backend: str) -> None:
        with open(os.path.join(os.environ["TRIVIAL_SETUP_DIR"], f"{os.getpid()}.pid"), "w") as fh:
            fh.write(str(os.getpid()))

    def cases(self, inputs) -> list[Case]:
        want, deadline = int(os.environ.get("TRIVIAL_EXPECT_WORKERS", "0")), time.monotonic() + 60
        while len(os.listdir(os.environ["TRIVIAL_SETUP_DIR"])) < want:
            if time.monotonic() > deadline:
                raise RuntimeError("no worker was set up while the cases were listed")
            time.sleep(0.05)
        if os.environ.get("TRIVIAL_LISTING_FAILS"):
            raise RuntimeError("planted listing failure")
        return super().cases(inputs)


TIER = TrivialTier()
CHUNKED = ChunkedTier()
PRESTART = PrestartTier()
