"""The `neuron` device registers when it is chosen (`import backend`, `get_backend("neuron")`,
`--backend neuron`), once, everywhere: in-process, in subprocesses and under pytest-xdist; never by
`import torch` alone unless NEURON_AUTOLOAD=1; and it steps aside when another backend holds
PrivateUse1, whichever was imported first."""

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


def test_import_torch_and_the_harness_leave_privateuse1_free_in_a_fresh_process():
    """Installing the harness never changes `import torch` for another backend: neither torch nor
    the harness's own modules register the simulator."""
    proc = _run(
        """
        import json, sys, torch
        after_torch = (torch._C._get_privateuse1_backend_name(), "backend" in sys.modules)
        import contracts.backends, harness.cli, harness.stages.check, registry.replay
        contracts.backends.get_backend("cpu")
        print(json.dumps({"after_torch": after_torch,
                          "after_harness": [torch._C._get_privateuse1_backend_name(),
                                            "backend" in sys.modules]}))
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1", "NEURON_AUTOLOAD": ""},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"after_torch": ["privateuseone", False], "after_harness": ["privateuseone", False]}


def test_neuron_autoload_opts_in_to_the_device_at_import_torch_and_reimport_is_safe():
    """NEURON_AUTOLOAD=1: the torch.backends entry point loads the device on `import torch`;
    importing/reloading/registering again changes nothing."""
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
        """,
        env={"NEURON_AUTOLOAD": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"},
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


@pytest.mark.parametrize("autoload", [None, "0"])
def test_choosing_neuron_activates_the_simulator_without_torch_autoload(autoload):
    """get_backend("neuron") (what --backend neuron does) registers the device whether PyTorch's
    own autoload is on (unset) or off (TORCH_DEVICE_BACKEND_AUTOLOAD=0)."""
    import os

    env = {
        k: v for k, v in os.environ.items() if k not in ("TORCH_DEVICE_BACKEND_AUTOLOAD", "NEURON_AUTOLOAD")
    }
    if autoload is not None:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = autoload
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import json, torch
                before = torch._C._get_privateuse1_backend_name()
                from contracts.backends import get_backend
                adapter = get_backend("neuron")
                x = torch.ones(3, device=adapter.device) * 2
                print(json.dumps({"before": before, "after": torch._C._get_privateuse1_backend_name(),
                                  "sum": x.sum().item(), "available": adapter.is_available()}))
                """
            ),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"before": "privateuseone", "after": "neuron", "sum": 6.0, "available": True}


def test_harness_check_backend_neuron_runs_with_torch_autoload_off():
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "harness"), "check", "bert", "--backend", "neuron"]
        + ["--stages", "forward", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**__import__("os").environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "NEURON_AUTOLOAD": ""},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    stages = {name: s["status"] for name, s in json.loads(proc.stdout)["stages"].items()}
    assert stages["load"] == "pass" and stages["forward"] == "pass", stages


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


TINY_BACKEND = """
import types, torch

def register(name):
    \"\"\"A tiny out-of-tree backend: renames PrivateUse1 and gives it a device module.\"\"\"
    torch.utils.rename_privateuse1_backend(name)
    module = types.ModuleType("tiny_other_device.module")
    module.is_available = lambda: True
    module.device_count = lambda: 1
    torch._register_device_module(name, module)

def load():
    register("otherdev")
"""


def _tiny_backend(tmp_path: Path, entry_point: bool = False) -> dict:
    """The tiny test-only backend as an importable module; with `entry_point`, also installed
    beside this project with a `torch.backends` entry point that loads it on `import torch`."""
    (tmp_path / "tiny_other_device.py").write_text(textwrap.dedent(TINY_BACKEND))
    if entry_point:
        dist = tmp_path / "tiny_other_device-1.0.dist-info"
        dist.mkdir(exist_ok=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-other-device\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text("[torch.backends]\ntiny = tiny_other_device:load\n")
    import os

    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}


_REPORT = """
import json, sys, warnings
def report(caught, refused):
    import torch
    print(json.dumps({"privateuse1": torch._C._get_privateuse1_backend_name(),
                      "other_module": getattr(getattr(torch, "otherdev", None), "__name__", None),
                      "other_device": str(torch.device("otherdev", 0)),
                      "ours": getattr(torch, "_neuron_backend_registered", False),
                      "refused": refused,
                      "warnings": [str(w.message) for w in caught]}))
"""


@pytest.mark.parametrize("order", ["other_backend_first", "harness_first"])
def test_another_privateuse1_backend_works_whether_registered_before_or_after_the_harness(tmp_path, order):
    """A tiny backend renaming PrivateUse1 registers before or after the harness is imported; it
    works either way, and choosing the simulator then steps aside with a clear message."""
    first, second = (
        ("import tiny_other_device; tiny_other_device.load()", "import harness.cli, harness.stages.check")
        if order == "other_backend_first"
        else (
            "import harness.cli, harness.stages.check",
            "import tiny_other_device; tiny_other_device.load()",
        )
    )
    proc = _run(
        _REPORT
        + f"""
{first}
{second}
from contracts.backends import get_backend
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        get_backend("neuron")
        refused = ""
    except RuntimeError as exc:
        refused = str(exc)
report(caught, refused)
""",
        env=_tiny_backend(tmp_path),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["privateuse1"] == "otherdev" and out["other_module"] == "tiny_other_device.module"
    assert out["other_device"] == "otherdev:0" and out["ours"] is False
    assert "the simulated neuron device is not registered" in out["refused"]
    assert "'otherdev'" in out["refused"]
    assert any("steps aside" in w and "otherdev" in w for w in out["warnings"]), out["warnings"]


def test_a_backend_autoloaded_by_import_torch_keeps_privateuse1(tmp_path):
    """The other backend loads through its own torch.backends entry point, as a real one does:
    `import torch` registers it, the harness's entry point does nothing, `import backend` steps aside."""
    proc = _run(
        _REPORT
        + """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    import backend
report(caught, backend.stepped_aside)
""",
        env={**_tiny_backend(tmp_path, entry_point=True), "NEURON_AUTOLOAD": ""},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr  # `import torch` still works for the whole venv
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["privateuse1"] == "otherdev" and out["ours"] is False
    assert "'otherdev'" in out["refused"]  # backend.stepped_aside says who holds it
    assert any("steps aside" in w for w in out["warnings"]), out["warnings"]


def test_neuron_autoload_steps_aside_for_a_backend_that_loaded_first(tmp_path):
    """NEURON_AUTOLOAD=1 with another autoloading backend earlier on sys.path: that one keeps
    PrivateUse1, `import torch` still works, and the simulator says why it stepped aside."""
    proc = _run(
        _REPORT
        + """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
import backend
report(caught, backend.stepped_aside)
""",
        env={**_tiny_backend(tmp_path, entry_point=True), "NEURON_AUTOLOAD": "1"},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["privateuse1"] == "otherdev" and out["ours"] is False
    assert any("steps aside" in w for w in out["warnings"]), out["warnings"]
