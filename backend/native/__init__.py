"""The device's native fast path: a small C++ extension, built once per machine on first use.

The simulated device is complete in pure Python; this extension only makes the common case fast.
It repeats, per op call, what Python decided and cached for that op and its input dtypes (a
native lowering: compute on the CPU payloads, adopt the results), and hands everything else to
the Python kernels unchanged, so events, counts, memory accounting and results are the same
with and without it. It also gives the op recorder (``registry.recorder``) a dispatcher hook
that counts repeated calls without entering Python.

It is compiled with ``torch.utils.cpp_extension`` (g++ and ninja; ninja comes with the ``ninja``
Python package) the first time ``backend`` is imported, into
``$TORCH_EXTENSIONS_DIR/neuron_native_<hash>`` (default ``~/.cache/torch_extensions/...``; the
hash covers the sources and the torch and Python versions, so a change rebuilds), under a file
lock so parallel processes build it once. If the build fails the reason is kept in that
directory (``FAILED``; delete it to retry) and the device runs on the pure-Python path.

``NEURON_NATIVE=0`` turns it off (the pure-Python path), e.g. to compare the two.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

ENV_VAR = "NEURON_NATIVE"
_UNITY = "neuron_native.cpp"  # includes the parts below (one translation unit: torch headers parse once)
_SOURCES = ("common.h", "convert.cpp", "device.cpp", "recorder.cpp", "executor.cpp", "module.cpp")
_CFLAGS = ("-O2", "-fvisibility=hidden")
_HERE = Path(__file__).resolve().parent

_lock = threading.Lock()
_module: ModuleType | None = None
_status: dict = {"enabled": None, "loaded": False, "reason": "not loaded yet", "build_seconds": None, "path": None}


def enabled_by_env() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "off", "false", "no")


def _name() -> str:
    import torch

    digest = hashlib.sha256()
    for src in (_UNITY,) + _SOURCES:
        digest.update((_HERE / "csrc" / src).read_bytes())
    digest.update(f"{torch.__version__}|{sys.version}|{_CFLAGS}".encode())
    return f"neuron_native_{digest.hexdigest()[:12]}"


def build_dir(name: str | None = None) -> Path:
    """Where the extension is built: torch's JIT extension directory (``TORCH_EXTENSIONS_DIR``)."""
    from torch.utils.cpp_extension import get_default_build_root

    name = name or _name()
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not root:
        tag = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_cpu"
        root = os.path.join(get_default_build_root(), tag)
    return Path(root) / name


def _import_built(name: str, directory: Path) -> ModuleType | None:
    so = directory / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    alt = directory / f"{name}.so"
    path = so if so.is_file() else alt
    if not ((directory / "BUILT").is_file() and path.is_file()):
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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


def _build(name: str, directory: Path) -> ModuleType:
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    print(f"neuron: building the native fast path in {directory} (once; about a minute)...", file=sys.stderr)
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join(_ninja_dirs() + ([path] if path else []))
    try:
        module = cpp_extension.load(
            name=name,
            sources=[str(_HERE / "csrc" / _UNITY)],
            extra_cflags=list(_CFLAGS),
            build_directory=str(directory),
            verbose=False,
        )
    finally:
        os.environ["PATH"] = path
    tmp = directory / f"BUILT.{os.getpid()}"
    tmp.write_text(name + "\n")
    os.replace(tmp, directory / "BUILT")
    return module


def load() -> ModuleType | None:
    """The extension module, building it if needed; None when disabled or unavailable."""
    global _module
    with _lock:
        if _module is not None or _status["enabled"] is not None:
            return _module
        _status["enabled"] = enabled_by_env()
        if not _status["enabled"]:
            _status["reason"] = f"{ENV_VAR}={os.environ.get(ENV_VAR)}"
            return None
        try:
            name = _name()
            directory = build_dir(name)
            _status["path"] = str(directory)
            failed = directory / "FAILED"
            if failed.is_file():
                _status["reason"] = f"an earlier build failed (see {failed}; delete it to retry)"
                return None
            module = _import_built(name, directory)
            if module is None:
                start = time.perf_counter()
                try:
                    module = _build(name, directory)
                except Exception as exc:  # noqa: BLE001 - a missing compiler must not break the device
                    text = f"{type(exc).__name__}: {exc}"
                    failed.write_text(text[-4000:])
                    _status["reason"] = f"build failed: {text.splitlines()[0][:300] if text else ''}"
                    import warnings

                    warnings.warn(f"neuron: native fast path unavailable, using pure Python ({_status['reason']})")
                    return None
                _status["build_seconds"] = round(time.perf_counter() - start, 1)
        except Exception as exc:  # noqa: BLE001 - e.g. an unwritable cache directory
            _status["reason"] = f"{type(exc).__name__}: {exc}"
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
