"""backend.native builds where it can and otherwise falls back cleanly: the device then runs on the
pure-Python path and says why (no compiler, a failed build with this toolchain, a cached build that
does not load), and processes that build at once build once, also when one of them is killed.

Each case is a fresh process with its own TORCH_EXTENSIONS_DIR. A stand-in compiler (``$CXX``, a
shell script) records each compile and "links" by copying this process's real build, so the
locking is tested without compiling the extension again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend import native

ROOT = Path(__file__).resolve().parents[2]

_PROBE = r"""
import json, torch
from backend import native
x = torch.arange(6.0, device="neuron").reshape(2, 3)
print(json.dumps({"status": native.status(), "result": (x * 2 + 1).sum(0).cpu().tolist()}))
"""
_EXPECTED = [8.0, 12.0, 16.0]  # (x * 2 + 1).sum(0) on the CPU

_FAKE_CXX = r"""#!/bin/sh
# stands in for c++: records each compile (optionally slow or failing), links by copying a real build
mode=other; out=; dep=; prev=
for a in "$@"; do
  [ "$a" = "-c" ] && mode=compile
  [ "$a" = "-shared" ] && [ "$mode" != compile ] && mode=link
  [ "$prev" = "-o" ] && out=$a
  [ "$prev" = "-MF" ] && dep=$a
  prev=$a
done
case $mode in
  compile)
    echo $$ >> "$FAKE_CXX_LOG"
    sleep "${FAKE_CXX_DELAY:-0}"
    if [ -n "$FAKE_CXX_FAIL" ]; then echo "fake-c++: error: planted compile error" >&2; exit 1; fi
    echo "$out:" > "$dep"; : > "$out" ;;
  link) cp "$FAKE_CXX_SO" "$out" ;;
  *) command -v g++ >/dev/null && exec g++ "$@"; exit 0 ;;
esac
"""


def _env(ext_dir: Path, **extra: str) -> dict:
    env = {**os.environ, "NEURON_NATIVE": "1", "TORCH_EXTENSIONS_DIR": str(ext_dir), "PYTHONPATH": str(ROOT)}
    env.update(extra)
    return env


def _fake_cxx(tmp_path: Path, name: str = "c++") -> Path:
    directory = tmp_path / f"bin-{name}-{time.monotonic_ns()}"
    directory.mkdir()
    script = directory / "c++"
    script.write_text(_FAKE_CXX)
    script.chmod(0o755)
    return script


def _start(env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _PROBE],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err


def _probe(env: dict) -> tuple[dict, str]:
    return _finish(_start(env))


def _compiles(log: Path) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def _real_build() -> str:
    if native.module() is None:
        pytest.skip(f"backend.native not loaded here ({native.status()['reason']}): no build to stand in for")
    return native.module().__file__


def test_without_a_compiler_the_device_runs_on_python_and_says_why(tmp_path):
    out, err = _probe(_env(tmp_path / "ext", CXX=str(tmp_path / "no-such-compiler")))
    assert out["result"] == _EXPECTED
    assert out["status"]["loaded"] is False
    assert "no C++ compiler" in out["status"]["reason"]
    assert "pure-Python path" in err and "no C++ compiler" in err


def test_a_failed_build_is_recorded_and_not_retried_with_the_same_compiler(tmp_path):
    ext, log = tmp_path / "ext", tmp_path / "compiles"
    cxx = _fake_cxx(tmp_path)
    env = _env(ext, CXX=str(cxx), FAKE_CXX_LOG=str(log), FAKE_CXX_FAIL="1")
    out, err = _probe(env)
    assert out["result"] == _EXPECTED and out["status"]["loaded"] is False
    assert out["status"]["reason"].startswith("build failed")
    assert "pure-Python path" in err
    record = json.loads((Path(out["status"]["path"]) / "FAILED").read_text())
    assert "planted compile error" in record["error"] and record["toolchain"]
    assert _compiles(log) == 1

    out, _ = _probe(env)  # same toolchain: the recorded failure is the answer, no second attempt
    assert out["result"] == _EXPECTED and out["status"]["loaded"] is False
    assert "earlier build with this compiler failed" in out["status"]["reason"]
    assert _compiles(log) == 1

    other = _fake_cxx(tmp_path, "other")  # another compiler: tried again
    out, _ = _probe({**env, "CXX": str(other)})
    assert out["status"]["reason"].startswith("build failed")
    assert _compiles(log) == 2


def test_a_cached_build_that_does_not_load_is_rebuilt(tmp_path):
    so, ext, log = _real_build(), tmp_path / "ext", tmp_path / "compiles"
    name = Path(so).name.split(".")[0]
    stale = ext / name
    stale.mkdir(parents=True)
    (stale / f"{name}.so").write_bytes(b"not a shared object")
    (stale / "BUILT").write_text(name + "\n")
    out, err = _probe(_env(ext, CXX=str(_fake_cxx(tmp_path)), FAKE_CXX_LOG=str(log), FAKE_CXX_SO=so))
    assert out["result"] == _EXPECTED
    assert out["status"]["loaded"] is True, out["status"]
    assert "does not load" in err
    assert _compiles(log) == 1


@pytest.mark.slow
def test_processes_that_start_at_once_build_once(tmp_path):
    so, log = _real_build(), tmp_path / "compiles"
    env = _env(
        tmp_path / "ext",
        CXX=str(_fake_cxx(tmp_path)),
        FAKE_CXX_LOG=str(log),
        FAKE_CXX_SO=so,
        FAKE_CXX_DELAY="3",
    )
    procs = [_start(env) for _ in range(3)]
    results = [_finish(p)[0] for p in procs]
    assert [r["result"] for r in results] == [_EXPECTED] * 3
    assert all(r["status"]["loaded"] for r in results), [r["status"] for r in results]
    assert sum(r["status"]["build_seconds"] is not None for r in results) == 1  # one built, two waited
    assert _compiles(log) == 1


@pytest.mark.slow
def test_a_killed_build_does_not_leave_the_next_process_waiting(tmp_path):
    so, log = _real_build(), tmp_path / "compiles"
    env = _env(tmp_path / "ext", CXX=str(_fake_cxx(tmp_path)), FAKE_CXX_LOG=str(log), FAKE_CXX_SO=so)
    first = _start({**env, "FAKE_CXX_DELAY": "300"}, start_new_session=True)
    deadline = time.monotonic() + 240
    while _compiles(log) == 0:
        assert first.poll() is None and time.monotonic() < deadline, "the first build never started"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # mid-build: torch's lock file stays behind
    first.communicate()
    out, _ = _finish(_start(env), timeout=240)
    assert out["result"] == _EXPECTED and out["status"]["loaded"] is True, out["status"]
    assert _compiles(log) == 2
