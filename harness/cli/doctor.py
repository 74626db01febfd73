"""`harness doctor`: what this installation would run with.

Versions of the harness and its main libraries, the backend (``--backend``, resolved like every
other command through :func:`contracts.backends.get_backend`), whether that backend is simulated or
real (``unknown`` when the adapter does not say), and what its adapter's ``describe()`` says: the
backend's identity (``versions`` and ``settings``, as runs.parquet records them) and the device's
facts: lowering-table version, fallback mode, precision mode and memory capacity (null where the
device has no such setting).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata
from typing import Any

HELP = "Print versions, the backend in use (simulated or real) and its settings."

EPILOG = """examples:
  harness doctor
  harness doctor --json
  harness doctor --backend cpu
  harness doctor --backend mypkg:mydev      # a module that registers PyTorch device 'mydev'

Exit code 0 when the backend resolves and its device is available, 1 when it is not available,
2 when --backend cannot be resolved.
"""

_PACKAGES = ("torch", "transformers", "huggingface_hub")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--backend", default="neuron", help="neuron (default), cpu, cuda or MODULE:DEVICE")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def collect(backend_spec: str) -> tuple[dict[str, Any], int]:
    from harness import __version__

    report: dict[str, Any] = {
        "versions": {
            "harness": __version__,
            "python": platform.python_version(),
            **{name: _version(name) for name in _PACKAGES},
        },
        "platform": platform.platform(),
    }
    from contracts.backends import get_backend, kind

    try:
        adapter = get_backend(backend_spec)
    except Exception as exc:  # noqa: BLE001 - bad spec, or its module failed to import
        report["backend"] = {"backend": backend_spec, "error": f"{type(exc).__name__}: {exc}"}
        return report, 2
    try:
        info = adapter.describe()
    except Exception as exc:  # noqa: BLE001 - a broken device setting is reported, not fatal
        report["backend"] = {"backend": backend_spec, "error": f"{type(exc).__name__}: {exc}"}
        return report, 2
    info["kind"] = kind(adapter.simulated)
    report["backend"] = info
    return report, 0 if info["available"] else 1


def _print_text(report: dict[str, Any]) -> None:
    print("versions:")
    for name, version in report["versions"].items():
        print(f"  {name:<16} {version or 'not installed'}")
    b = report["backend"]
    print("backend:")
    if "error" in b:
        print(f"  {b['backend']}: cannot be resolved: {b['error']}")
        return
    print(f"  {'name':<16} {b['backend']} (device '{b['device']}', {b['kind']})")
    print(f"  {'available':<16} {b['available']}")
    print(f"  {'fallbacks':<16} {'reported' if b['reports_fallbacks'] else 'not reported'}")
    print(f"  {'compile backend':<16} {b['compile_backend'] or 'none'}")
    for key in ("versions", "settings"):
        for name, value in (b.get(key) or {}).items():
            print(f"  {key[:-1] + ' ' + name:<16} {value}")
    table = b.get("lowering_table")
    if table:
        text = (
            table.get("error") or f"{table['version']} ({table['native_ops']} native ops, {table['source']})"
        )
        print(f"  {'lowering table':<16} {text}")
    for key, label in (("fallback_mode", "fallback mode"), ("precision", "precision")):
        if b.get(key) is not None:
            print(f"  {label:<16} {b[key]}")
    if b.get("memory_capacity_bytes") is not None:
        cap = b["memory_capacity_bytes"]
        print(f"  {'memory capacity':<16} {cap} bytes ({cap / (1 << 30):.2f} GiB)")
    fast = b.get("native_fast_path")
    if fast:
        text = "C++ kernels" if fast.get("loaded") else f"off, pure-Python path ({fast.get('reason')})"
        print(f"  {'native path':<16} {text}")
    if b.get("planted_faults"):
        names = b["planted_faults"]
        more = ", ..." if len(names) > 5 else ""
        print(
            f"  {'planted faults':<16} {len(names)} ({', '.join(names[:5])}{more}): "
            "the device is wrong on purpose (NEURON_FAULTS)"
        )


def run(args: argparse.Namespace) -> int:
    report, code = collect(args.backend)
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        _print_text(report)
    return code
