"""`import backend` registers the `neuron` device once, everywhere: in-process, in subprocesses,
via the torch.backends entry point, and under pytest-xdist."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import backend

ROOT = Path(__file__).resolve().parents[2]


def _run(
    code: str, env: dict | None = None, timeout: int = 120, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    import os

    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=full_env,
    )


def test_import_twice_and_reload_keep_one_registration():
    again = importlib.import_module("backend")
    assert again is backend
    backend.device.register()  # a second explicit call is a no-op
    importlib.reload(backend)  # re-running the package body must not re-register
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    x = torch.ones(3, device="neuron") * 2
    assert x.device.type == "neuron" and x.cpu().tolist() == [2.0, 2.0, 2.0]


def test_import_torch_alone_autoloads_the_device_and_reimport_is_safe_in_a_fresh_process():
    """One subprocess (importing torch costs seconds): the torch.backends entry point loads the
    device on `import torch`; importing/reloading/registering again changes nothing."""
    proc = _run(
        """
        import json, sys, torch
        loaded_by_torch = "backend" in sys.modules
        x = torch.arange(4, device="neuron") + 1
        import importlib, backend, backend.device
        importlib.reload(backend)
        backend.device.register()
        y = torch.zeros(2, device="neuron").sum().item()
        print(json.dumps({"device": str(x.device), "values": x.cpu().tolist(),
                          "available": torch.neuron.is_available(),
                          "loaded_by_torch": loaded_by_torch, "after_reload": y}))
        """
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "device": "neuron:0",
        "values": [1, 2, 3, 4],
        "available": True,
        "loaded_by_torch": True,
        "after_reload": 0.0,
    }


def test_import_backend_before_torch_in_a_fresh_process():
    """`import backend` first: torch's entry point finds the half-imported package and must not fail."""
    proc = _run(
        """
        import backend
        import torch
        print(torch.ones(2, device="neuron").sum().item(), backend.is_simulated)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "2.0 True"


def test_torch_neuron_module_api():
    import gc

    gc.collect()
    mod = torch.neuron
    assert mod.is_available() is True
    assert mod.device_count() == 1
    assert mod.current_device() == 0
    assert mod.synchronize() is None
    mod.manual_seed(123)
    a = torch.randn(5, device="neuron").cpu()
    mod.manual_seed(123)
    b = torch.randn(5, device="neuron").cpu()
    assert torch.equal(a, b)
    mod.reset_peak_memory_stats()
    base = mod.memory_allocated()
    assert mod.max_memory_allocated() == base
    t = torch.empty(1024, device="neuron")
    assert mod.memory_allocated() == base + 4096
    assert mod.max_memory_allocated() >= base + 4096
    del t
    assert mod.memory_allocated() == base
    assert mod.max_memory_allocated() >= base + 4096
    mod.reset_peak_memory_stats()
    assert mod.max_memory_allocated() == base


def test_torch_manual_seed_seeds_the_device_generator():
    torch.manual_seed(7)
    a = torch.rand(4, device="neuron").cpu()
    torch.manual_seed(7)
    b = torch.rand(4, device="neuron").cpu()
    assert torch.equal(a, b)


def test_current_accelerator_reports_neuron():
    acc = torch.accelerator.current_accelerator()
    assert acc is not None and acc.type == "neuron"
    assert torch.accelerator.is_available()


def test_is_simulated_flag_and_harness_adapter():
    from contracts.backends import fallback_ops, get_backend

    assert backend.is_simulated is True
    adapter = get_backend("neuron")
    assert adapter.device_type == "neuron" and adapter.simulated is True
    assert adapter.reports_fallbacks is True
    with adapter.track_fallbacks() as events:
        torch.nonzero(torch.ones(3, device="neuron"))
    assert fallback_ops(events) == ["aten.nonzero.default"]


@pytest.mark.slow
def test_device_works_in_two_pytest_xdist_workers(tmp_path):
    test_file = tmp_path / "test_two_workers.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import os, torch, backend

            def _check():
                x = torch.full((3,), 2.0, device="neuron")
                assert (x * x).sum().item() == 12.0
                return os.environ.get("PYTEST_XDIST_WORKER")

            def test_a():
                assert _check() is not None

            def test_b():
                assert _check() is not None
            """
        )
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(test_file),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


@pytest.mark.parametrize("name", ["neuron", "neuron:0"])
def test_device_strings(name):
    assert torch.ones(1, device=name).device == torch.device("neuron", 0)


def _fake_backend_first(tmp_path: Path, device_name: str) -> dict:
    """A fake other backend installed beside this one: its `torch.backends` entry point loads first
    (its dist-info is earlier on sys.path) and claims PrivateUse1 under `device_name`."""
    (tmp_path / "fake_other_device.py").write_text(
        textwrap.dedent(f"""
        import types, torch

        def load():
            torch.utils.rename_privateuse1_backend({device_name!r})
            module = types.ModuleType("fake_other_device.module")
            module.is_available = lambda: True
            torch._register_device_module({device_name!r}, module)
    """)
    )
    dist = tmp_path / "fake_other_device-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-other-device\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[torch.backends]\nfake = fake_other_device:load\n")
    import os

    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}


@pytest.mark.parametrize("device_name", ["otherdev", "neuron"])
def test_autoload_steps_aside_when_another_backend_owns_the_device(tmp_path, device_name):
    proc = _run(
        """
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch  # both torch.backends entry points run: the fake one first
        import backend
        print(json.dumps({"privateuse1": torch._C._get_privateuse1_backend_name(),
                          "module": getattr(getattr(torch, "neuron", None), "__name__", None),
                          "ours": getattr(torch, "_neuron_backend_registered", False),
                          "stepped_aside": backend.stepped_aside,
                          "warnings": [str(w.message) for w in caught]}))
        """,
        env=_fake_backend_first(tmp_path, device_name),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr  # `import torch` still works for the whole venv
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["privateuse1"] == device_name and out["ours"] is False
    assert device_name in out["stepped_aside"] or "fake_other_device" in out["stepped_aside"]
    assert any("steps aside" in w for w in out["warnings"]), out["warnings"]
    if device_name == "neuron":
        assert out["module"] == "fake_other_device.module"  # the other backend keeps torch.neuron


def test_the_harness_adapter_refuses_a_device_the_simulator_does_not_own(tmp_path):
    proc = _run(
        """
        import warnings
        warnings.simplefilter("ignore")
        import torch
        from contracts.backends import get_backend
        try:
            get_backend("neuron")
        except RuntimeError as exc:
            print("refused:", exc)
        """,
        env=_fake_backend_first(tmp_path, "neuron"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "refused: the simulated neuron device is not registered" in proc.stdout
