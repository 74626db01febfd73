"""The device's native fast path: a small C++ extension, built once per machine on first use.

The simulated device is complete in pure Python; this extension only makes the common case fast.
It repeats, per op call, what Python decided and cached for that op and its input dtypes (a
native lowering: compute on the CPU payloads, adopt the results), and hands everything else to
the Python kernels unchanged, so events, counts, memory accounting and results are the same
with and without it. It also gives the op recorder (``registry.recorder``) a dispatcher hook
that counts repeated calls without entering Python.

It is compiled with ``torch.utils.cpp_extension`` (``$CXX`` or ``c++``, and ninja, which comes
with the ``ninja`` Python package) the first time ``backend`` is imported, into
``$TORCH_EXTENSIONS_DIR/neuron_native_<hash>`` (default ``~/.cache/torch_extensions/...``; the
hash covers the sources and the torch and Python versions, so a change rebuilds). Processes
that start at once (pytest-xdist workers) build it once: the build holds an OS file lock
(``neuron.lock``, released by the kernel when its holder dies, so a killed build never leaves
the others waiting) and publishes ``BUILT`` only when the module is complete.

Whenever it cannot be used the device runs on the pure-Python path and the reason is logged
(``backend.native`` logger, once per process) and kept in :func:`status` (``harness doctor``):
no compiler, no ninja or no Python headers, a failed build (kept in ``FAILED`` with the toolchain
it used, so the same toolchain is not retried every run; delete it, or change compiler, to retry), a cached
build that no longer loads (it is rebuilt), an unwritable cache directory.
``NEURON_NATIVE=0`` turns it off on purpose (e.g. to compare the two paths).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import shutil
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from backend import settings
from backend.errors import Unavailable

ENV_VAR = settings.Settings.native.name
_UNITY = (
    "neuron_native.cpp"  # includes the other csrc/ files (one translation unit: torch headers parse once)
)
#: -ftree-vectorize: GCC 12 does not vectorize loops at -O2 (clang does), and the bf16 rounding
#: pass, run once per rounded input, is several times faster vectorized
_CFLAGS = ("-O2", "-ftree-vectorize", "-fvisibility=hidden")
_HERE = Path(__file__).resolve().parent
_LOCK_WAIT_SECONDS = 1800.0  # waiting for another process's build; then run on the Python path

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_module: ModuleType | None = None
_status: dict = {
    "enabled": None,
    "loaded": False,
    "reason": "not loaded yet",
    "build_seconds": None,
    "path": None,
}


def enabled_by_env() -> bool:
    return settings.current().native


def _name() -> str:
    import torch

    digest = hashlib.sha256()
    for src in sorted((_HERE / "csrc").iterdir()):
        digest.update(src.name.encode() + b"\0" + src.read_bytes())
    digest.update(f"{torch.__version__}|{sys.version}|{_CFLAGS}".encode())
    return f"neuron_native_{digest.hexdigest()[:12]}"


def build_dir(name: str | None = None) -> Path:
    """Where the extension is built: torch's JIT extension directory (``TORCH_EXTENSIONS_DIR``)."""
    from torch.utils.cpp_extension import get_default_build_root

    name = name or _name()
    root = settings.current().torch_extensions_dir
    if not root:
        tag = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_cpu"
        root = os.path.join(get_default_build_root(), tag)
    return Path(root) / name


def _library(name: str, directory: Path) -> Path:
    so = directory / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    return so if so.is_file() else directory / f"{name}.so"


def _import_built(name: str, directory: Path) -> ModuleType | None:
    """The published build, None when there is none yet; Unavailable when it does not load."""
    path = _library(name, directory)
    if not ((directory / "BUILT").is_file() and path.is_file()):
        return None
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as exc:  # truncated file, a torch it was not built against, ...
        raise Unavailable(f"the cached build {path} does not load: {type(exc).__name__}: {exc}") from exc
    return module


def _ninja_dirs() -> list[str]:
    """Where ninja may be: the `ninja` package's binary and this interpreter's bin directory
    (a venv that is used without being activated has them off PATH)."""
    dirs = [os.path.dirname(sys.executable)]
    try:
        import ninja  # the PyPI package (a dependency): ships the binary

        dirs.insert(0, ninja.BIN_DIR)
    except (ImportError, AttributeError):
        pass
    return dirs


def _search_path() -> str:
    path = settings.current().path
    return os.pathsep.join(_ninja_dirs() + ([path] if path else []))


def toolchain() -> dict:
    """The compiler and ninja the build would use (torch's rule: ``$CXX``, else ``c++``), with a
    fingerprint (resolved path, size, mtime) that tells a new toolchain from the one that failed."""
    cxx = settings.current().cxx
    found = {"cxx": shutil.which(cxx), "ninja": shutil.which("ninja", path=_search_path())}
    python_h = Path(sysconfig.get_paths()["include"]) / "Python.h"
    parts = [f"python:{python_h}:{python_h.is_file()}"]
    for tool, path in found.items():
        if path is None:
            parts.append(f"{tool}:-")
            continue
        real = os.path.realpath(path)
        st = os.stat(real)
        parts.append(f"{tool}:{real}:{st.st_size}:{st.st_mtime_ns}")
    return {
        "cxx_requested": cxx,
        **found,
        "python_h": str(python_h) if python_h.is_file() else None,
        "python_h_expected": str(python_h),
        "fingerprint": "|".join(parts),
    }


@contextlib.contextmanager
def _build_lock(directory: Path, wait_seconds: float = _LOCK_WAIT_SECONDS) -> Iterator[None]:
    """An exclusive OS lock on ``neuron.lock``: the kernel drops it when its holder dies."""
    try:
        import fcntl
    except ImportError:  # not POSIX: torch's own lock file inside cpp_extension.load is all there is
        yield
        return
    with open(directory / "neuron.lock", "a+") as handle:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"waited {wait_seconds:.0f} s for another process's build in {directory}"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _earlier_failure(directory: Path, fingerprint: str) -> str | None:
    """The error of an earlier build with the same toolchain (None: none, or another toolchain)."""
    failed = directory / "FAILED"
    try:
        record = json.loads(failed.read_text())
    except (OSError, ValueError):
        return None  # no record, or an unreadable one: build again
    if not isinstance(record, dict) or record.get("toolchain") != fingerprint:
        return None
    first = str(record.get("error", "")).strip().splitlines()
    return (first[0][:300] if first else "unknown error") + f" (see {failed}; delete it to retry)"


def _clear_build(name: str, directory: Path) -> None:
    """Remove a published build that does not load, so the next build starts from nothing."""
    for leftover in ("BUILT", "neuron_native.o", ".ninja_log", ".ninja_deps", "lock"):
        with contextlib.suppress(FileNotFoundError):
            (directory / leftover).unlink()
    for so in directory.glob(f"{name}*.so"):
        so.unlink()


def _compile(name: str, directory: Path, tools: dict) -> ModuleType:
    from torch.utils import cpp_extension

    print(f"neuron: building the native fast path in {directory} (once; about a minute)...", file=sys.stderr)
    try:
        with settings.path_prepended(_ninja_dirs()):  # torch finds ninja and the compiler on PATH
            module = cpp_extension.load(
                name=name,
                sources=[str(_HERE / "csrc" / _UNITY)],
                extra_cflags=list(_CFLAGS),
                build_directory=str(directory),
                verbose=False,
            )
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        record = {
            "toolchain": tools["fingerprint"],
            "cxx": tools["cxx"],
            "ninja": tools["ninja"],
            "error": text[-4000:],
        }
        (directory / "FAILED").write_text(json.dumps(record, indent=1))
        first = text.strip().splitlines()
        raise Unavailable(f"build failed: {first[0][:300] if first else type(exc).__name__}") from exc
    with contextlib.suppress(FileNotFoundError):
        (directory / "FAILED").unlink()
    tmp = directory / f"BUILT.{os.getpid()}"
    tmp.write_text(name + "\n")
    os.replace(tmp, directory / "BUILT")  # published last: a reader never sees half a build
    return module


def _obtain() -> ModuleType:
    """Import the published build, or build it (once across processes); Unavailable says why not."""
    name = _name()
    directory = build_dir(name)
    _status["path"] = str(directory)
    try:
        module = _import_built(name, directory)
    except Unavailable as exc:
        _log.warning("neuron: %s; rebuilding it", exc)
        module = None
    if module is not None:
        return module
    tools = toolchain()
    if tools["cxx"] is None:
        raise Unavailable(f"no C++ compiler: {tools['cxx_requested']!r} ($CXX, else c++) is not on PATH")
    if tools["ninja"] is None:
        raise Unavailable("ninja not found (the `ninja` package is a dependency: pip install ninja)")
    if tools["python_h"] is None:
        raise Unavailable(
            f"no Python headers: {tools['python_h_expected']} is missing (e.g. apt-get install python3-dev)"
        )
    earlier = _earlier_failure(directory, tools["fingerprint"])
    if earlier:
        raise Unavailable(f"an earlier build with this compiler failed: {earlier}")
    directory.mkdir(parents=True, exist_ok=True)
    with _build_lock(directory):
        try:
            module = _import_built(name, directory)  # another process may have built it meanwhile
        except Unavailable:
            _clear_build(name, directory)
            module = None
        if module is not None:
            return module
        earlier = _earlier_failure(directory, tools["fingerprint"])  # ... or failed meanwhile
        if earlier:
            raise Unavailable(f"a concurrent build with this compiler failed: {earlier}")
        # torch's own lock file, left by a build that was killed: no build of ours is running now
        with contextlib.suppress(FileNotFoundError):
            (directory / "lock").unlink()
        start = time.perf_counter()
        module = _compile(name, directory, tools)
        _status["build_seconds"] = round(time.perf_counter() - start, 1)
        return module


def unavailable(reason: str) -> None:
    """Record why the device runs on the pure-Python path, and say it once."""
    global _module
    _module = None
    _status.update(loaded=False, reason=reason)
    _log.warning("neuron: native fast path unavailable, the device runs on the pure-Python path (%s)", reason)


def load() -> ModuleType | None:
    """The extension module, building it if needed; None when disabled or unavailable."""
    global _module
    with _lock:
        if _module is not None or _status["enabled"] is not None:
            return _module
        _status["enabled"] = enabled_by_env()
        if not _status["enabled"]:
            _status["reason"] = f"{ENV_VAR}={settings.current().raw(ENV_VAR)}"
            return None
        try:
            module = _obtain()
        except Unavailable as exc:
            unavailable(str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - e.g. an unwritable cache directory: never break the device
            unavailable(f"{type(exc).__name__}: {exc}")
            return None
        _module = module
        _status.update(loaded=True, reason="")
        return module


def module() -> ModuleType | None:
    """The loaded extension (without loading it)."""
    return _module


def status() -> dict:
    """For `harness doctor`: enabled, loaded, reason when not, build directory, build seconds."""
    return dict(_status)
