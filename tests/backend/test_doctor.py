"""`harness doctor [--json]`: versions, the backend in use, simulated or real, and its settings."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

import backend
from harness.cli import main


def _doctor_json(capsys, *extra: str) -> tuple[int, dict]:
    code = main(["doctor", "--json", *extra])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # exactly one JSON object on stdout
    return code, json.loads(out[0])


def test_json_reports_versions_and_the_simulated_neuron_backend(capsys):
    code, report = _doctor_json(capsys)
    assert code == 0
    versions = report["versions"]
    assert versions["torch"] == metadata.version("torch")
    assert versions["transformers"] == metadata.version("transformers")
    assert versions["huggingface_hub"] == metadata.version("huggingface_hub")
    assert versions["harness"] and versions["python"].count(".") == 2
    b = report["backend"]
    assert b["backend"] == "neuron" and b["device"] == "neuron" and b["available"] is True
    assert b["simulated"] is True and b["kind"] == "simulated"
    assert b["lowering_table"]["version"] == backend.lowering.current_table().version
    assert b["fallback_mode"] == backend.fallback_mode()
    assert b["precision"] == backend.precision()
    assert b["memory_capacity_bytes"] == backend.memory_capacity()


def test_settings_changed_through_the_api_show_up(capsys):
    previous = backend.set_fallback_mode("warn")
    old_cap = backend.set_memory_capacity("2GiB")
    try:
        _, report = _doctor_json(capsys)
    finally:
        backend.set_fallback_mode(previous)
        backend.set_memory_capacity(old_cap)
    assert report["backend"]["fallback_mode"] == "warn"
    assert report["backend"]["memory_capacity_bytes"] == 2 << 30


def test_cpu_backend_is_real_and_has_no_neuron_settings(capsys):
    code, report = _doctor_json(capsys, "--backend", "cpu")
    assert code == 0
    b = report["backend"]
    assert b["backend"] == "cpu" and b["kind"] == "real" and b["simulated"] is False
    assert b["lowering_table"] is None and b["precision"] is None


def test_module_device_form_and_unresolvable_backend(capsys):
    code, report = _doctor_json(capsys, "--backend", "backend:neuron")
    assert code == 0 and report["backend"]["simulated"] is True
    code, report = _doctor_json(capsys, "--backend", "no_such_module_xyz:dev")
    assert code == 2 and "no_such_module_xyz" in report["backend"]["error"]


def test_text_output_names_backend_and_kind(capsys):
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "neuron" in text and "simulated" in text and "torch" in text and "lowering table" in text


@pytest.mark.parametrize("flag", ["--help"])
def test_help_lists_examples(capsys, flag):
    with pytest.raises(SystemExit):
        main(["doctor", flag])
    assert "harness doctor --json" in capsys.readouterr().out
