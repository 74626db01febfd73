"""Rule files load into typed models; a typo is an error naming the file, the entry and the key."""

from __future__ import annotations

import pytest

from contracts.errors import HarnessError, RuleFileError
from contracts.rulefiles import Rules, load_rules


class Tol(Rules):
    atol: float
    rtol: float = 0.0


class Table(Rules):
    version: int
    classes: dict[str, Tol]


def test_a_valid_file_loads_into_the_model(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 2\nclasses:\n  float32: {atol: 1.0e-5, rtol: 1.3e-6}\n")
    table = load_rules(Table, path)
    assert table.version == 2 and table.classes["float32"].atol == 1e-5


def test_an_unknown_key_names_file_entry_and_key(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 2\nclasses:\n  float32: {atoll: 1.0e-5}\n")
    with pytest.raises(RuleFileError) as info:
        load_rules(Table, path)
    text = str(info.value)
    assert str(path) in text
    assert "entry classes.float32: unknown key 'atoll'" in text
    assert "entry classes.float32: missing key 'atol'" in text
    assert isinstance(info.value, ValueError) and isinstance(info.value, HarnessError)


def test_toml_files_and_broken_syntax(tmp_path):
    good = tmp_path / "t.toml"
    good.write_text("version = 1\n[classes.int64]\natol = 0.0\n")
    assert load_rules(Table, good).classes["int64"].atol == 0.0
    bad = tmp_path / "b.yaml"
    bad.write_text("version: [1,\n")
    with pytest.raises(RuleFileError, match="not valid YAML"):
        load_rules(Table, bad)
    with pytest.raises(RuleFileError, match="cannot be read"):
        load_rules(Table, tmp_path / "missing.yaml")


def test_loaded_rules_are_frozen(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nclasses: {}\n")
    table = load_rules(Table, path)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        table.version = 3
