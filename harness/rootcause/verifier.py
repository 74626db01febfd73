"""A process that runs standalone repro files: torch and the device's module, nothing of the harness.

Verifying a repro means running its file on the backend and on the reference. A fresh interpreter
per file pays `import torch` and the device's start-up each time (10-60 s on a loaded machine,
more than the search that found the call), so one verifier process per worker runs them all: it
is started with the worker's environment (so the device it imports is the device of the run,
planted faults and all), executes each file as a script (`runpy.run_path`, the file's own imports
at its top) with `REPRO_DEVICE` set, and calls its `test_case` for each of its cases, as pytest
would. Each request is bounded; a verifier that runs out of time is killed (and a new one started
for the next request), one that dies (the repro crashed the device) reports it. A changed
environment starts a new verifier.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from typing import Any

#: the verifier's own code: reads one JSON request per line, answers one JSON line
DRIVER = r"""
import json, os, runpy, sys, traceback
import torch  # noqa: F401  (warm: every repro imports it)
for line in sys.stdin:
    req = json.loads(line)
    os.environ["REPRO_DEVICE"] = req["device"]
    out = {"status": "pass", "raised": "", "cases": 0}
    try:
        ns = runpy.run_path(req["file"], run_name="repro_" + str(abs(hash(req["file"]))))
        for case_id in sorted(ns["CASES"]):
            out["cases"] += 1
            ns["test_case"](case_id)
    except BaseException as exc:  # the test's failure is the answer
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        cls = type(exc)
        name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        out = {"status": "fail", "raised": f"{name}: {text}"[:300], "cases": out["cases"]}
    print(json.dumps(out), flush=True)
"""


class Verifier:
    """One long-lived verifier process (see the module docstring)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.env: dict[str, str] | None = None
        self.cwd = tempfile.mkdtemp(prefix="repro-verifier-")
        atexit.register(self.stop)

    def start(self) -> None:
        """Start the verifier for the current environment (a no-op when it runs for this one)."""
        env = dict(os.environ)
        if self.proc is not None and self.proc.poll() is None and env == self.env:
            return
        self.stop()
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", DRIVER],
            cwd=self.cwd,
            env={k: v for k, v in env.items() if k != "REPRO_DEVICE"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def run(self, path: str, device: str, seconds: float) -> dict[str, Any] | None:
        """Run the repro file on `device`: {"status": "pass"|"fail"|"died", "raised": "Class: message"};
        None when it did not answer within `seconds` (it is killed)."""
        self.start()
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps({"file": str(path), "device": device}) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return self._died()
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    return self._died()
                try:
                    return json.loads(line)
                except ValueError:
                    continue  # something the device printed: not an answer

    def _died(self) -> dict[str, Any]:
        assert self.proc is not None
        code = self.proc.wait()
        self.proc = None
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        return {"status": "died", "raised": f"the process died ({how})"}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


_verifier: Verifier | None = None


def verifier() -> Verifier:
    """The worker's verifier (started on first use)."""
    global _verifier
    if _verifier is None:
        _verifier = Verifier()
    return _verifier
