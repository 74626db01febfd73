"""backend.settings is the one reader of the device's environment: every variable with its default,
its rule and its meaning; a bad value is an error naming the variable and what it accepts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend import settings
from backend.errors import SettingsError
from backend.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
BACKEND = ROOT / "backend"

NEURON = [v for v in settings.variables() if v.name.startswith("NEURON_")]


def test_no_backend_module_but_settings_reads_the_environment():
    readers = re.compile(r"\bos\.environ\b|\bgetenv\b|\benviron\[")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(BACKEND.rglob("*.py"))
        if path.name != "settings.py" or path.parent != BACKEND
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if readers.search(line)
    ]
    assert found == []


def test_every_neuron_variable_the_device_names_is_a_setting():
    named = set()
    for path in BACKEND.rglob("*"):
        if path.suffix in (".py", ".yaml", ".cpp", ".h"):
            named.update(re.findall(r"\bNEURON_[A-Z_]+[A-Z]\b", path.read_text()))
    # the one variable read outside the package: it decides whether the package is imported at all
    import neuron_autoload

    assert named - {neuron_autoload.ENV_VAR} == {v.name for v in NEURON}


def test_the_docstring_table_lists_every_variable_with_its_field():
    rows = re.findall(r"^\| (NEURON_\w+) \| (\w+) \| ([^|]+) \| ([^|]+) \|$", settings.__doc__, re.M)
    assert [(name, field) for name, field, _, _ in rows] == [(v.name, v.field_name) for v in NEURON]
    assert all(default.strip() and meaning.strip() for _, _, default, meaning in rows)


def test_defaults_apply_when_unset_or_empty():
    empty = Settings({})
    blank = Settings({v.name: "" for v in settings.variables()})
    for v in NEURON:
        assert getattr(empty, v.field_name) == getattr(blank, v.field_name)
    assert (empty.compiler, empty.fallback_mode, empty.precision) == ("interpreter", "record", "bf16")
    assert empty.memory_capacity == 96 << 30 and empty.native is True and empty.faults is None
    assert empty.cache_dir.name == "neff-cache"


def test_values_are_parsed_into_their_types():
    s = Settings(
        {
            "NEURON_ADAPTIVE_EAGER": "yes",
            "NEURON_ADAPTIVE_MIN_REPEATS": "5",
            "NEURON_COMPILE_COST_SCALE": "0.5",
            "NEURON_CACHE_MAX_ENTRIES": "3",
            "NEURON_MEMORY_CAPACITY": "512MiB",
            "NEURON_MODEL_CODE_ROOTS": os.pathsep.join(["/a", "", "/b"]),
            "NEURON_NATIVE": "off",
            "NEURON_PRECISION": " FP32 ",
            "NEURON_FALLBACK_MODE": "Warn",
            "NEURON_FAULTS": "faults.yaml",
        }
    )
    assert s.adaptive_eager is True and s.adaptive_min_repeats == 5 and s.compile_cost_scale == 0.5
    assert s.cache_max_entries == 3 and s.memory_capacity == 512 << 20
    assert s.model_code_roots == ("/a", "/b") and s.native is False
    assert s.precision == "exact" and s.fallback_mode == "warn" and s.faults == Path("faults.yaml")


@pytest.mark.parametrize(
    "name,value,accepted",
    [
        ("NEURON_COMPILER", "gcc", "interpreter or inductor"),
        ("NEURON_FALLBACK_MODE", "loud", "record, warn or error"),
        ("NEURON_PRECISION", "fp8", "bf16 or exact"),
        ("NEURON_AUTOGRAD_THREAD", "sideways", "caller or device"),
        ("NEURON_COMPILE_FALLBACK", "retry", "raise or eager"),
        ("NEURON_NATIVE", "maybe", "1, true, yes or on"),
        ("NEURON_ADAPTIVE_EAGER", "2", "0, false, no or off"),
        ("NEURON_COMPILE_INJECT_FAILURE", "sure", "a switch"),
        ("NEURON_COMPILE_COST_SCALE", "fast", "a finite number >= 0"),
        ("NEURON_COMPILE_COST_SCALE", "-1", "a finite number >= 0"),
        ("NEURON_ADAPTIVE_MIN_REPEATS", "0", "a whole number >= 1"),
        ("NEURON_CACHE_MAX_BYTES", "lots", "a whole number of bytes"),
        ("NEURON_CACHE_MAX_ENTRIES", "-3", "a whole number >= 0"),
        ("NEURON_MEMORY_CAPACITY", "12 parsecs", "bytes or a size with a unit"),
    ],
)
def test_a_bad_value_names_the_variable_the_value_and_what_it_accepts(name, value, accepted):
    variable = next(v for v in settings.variables() if v.name == name)
    with pytest.raises(SettingsError) as info:
        getattr(Settings({name: value}), variable.field_name)
    assert isinstance(info.value, ValueError)
    assert f"{name}={value!r} is not valid" in str(info.value) and accepted in str(info.value)
    assert (info.value.variable, info.value.value) == (name, value)


def test_a_bad_value_fails_only_the_setting_that_reads_it():
    s = Settings({"NEURON_COMPILER": "gcc"})
    assert s.precision == "bf16" and s.cache_max_entries == 1024
    with pytest.raises(SettingsError):
        _ = s.compiler


def test_current_reads_the_environment_when_a_setting_is_used(monkeypatch):
    view = settings.current()
    monkeypatch.setenv("NEURON_COMPILE_COST_SCALE", "7")
    assert view.compile_cost_scale == 7.0
    monkeypatch.setenv("NEURON_COMPILE_COST_SCALE", "2")
    assert view.compile_cost_scale == 2.0
    assert settings.current().raw("NEURON_COMPILE_COST_SCALE") == "2"


def test_path_prepended_restores_the_path(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    with settings.path_prepended(["/opt/ninja"]) as path:
        assert settings.current().path == path == os.pathsep.join(["/opt/ninja", "/usr/bin"])
    assert settings.current().path == "/usr/bin"


def test_a_bad_value_read_at_import_fails_the_import_clearly():
    env = {**os.environ, "NEURON_FALLBACK_MODE": "loud", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", "import backend"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "SettingsError: NEURON_FALLBACK_MODE='loud' is not valid: use record, warn or error" in proc.stderr
