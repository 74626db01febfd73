"""Every device error lives in backend.errors, under NeuronError, and is still the built-in error it
is a kind of (callers catch either; the class names are what harnesses record)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch

from backend import errors

ROOT = Path(__file__).resolve().parents[2]

KINDS = {
    "NeuronFallbackError": RuntimeError,
    "NeuronOutOfMemoryError": torch.OutOfMemoryError,
    "NeuronUnsupportedError": NotImplementedError,
    "NeuronFaultError": RuntimeError,
    "NeuronCompileError": RuntimeError,
    "DynamicShapeError": ValueError,
    "CompileError": RuntimeError,
    "UnsupportedGraphError": ValueError,
    "CorruptArtifactError": ValueError,
    "SettingsError": ValueError,
    "DataFileError": ValueError,
    "LoweringTableError": ValueError,
    "FaultFileError": ValueError,
    "Unavailable": Exception,
}


def _classes_defined(path: Path) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text())
    return [
        (node.name, [ast.unparse(b) for b in node.bases])
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    ]


def test_no_exception_class_is_defined_outside_errors_py():
    exception_like = ("Error", "Exception", "Warning", "Unavailable")
    outside = [
        f"{path.relative_to(ROOT)}:{name}({', '.join(bases)})"
        for path in sorted((ROOT / "backend").rglob("*.py"))
        if path.name != "errors.py"
        for name, bases in _classes_defined(path)
        if any(b.endswith(exception_like) for b in bases) or name.endswith(exception_like)
    ]
    assert outside == []


def test_every_error_is_a_neuron_error_and_its_builtin_kind():
    defined = {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, Exception) and cls.__module__ == errors.__name__
    }
    assert set(defined) == {*KINDS, "NeuronError", "NeuronFallbackWarning"}
    for name, kind in KINDS.items():
        assert issubclass(defined[name], errors.NeuronError) and issubclass(defined[name], kind), name
    assert issubclass(errors.NeuronFallbackWarning, UserWarning)
    assert not issubclass(errors.NeuronFallbackWarning, errors.NeuronError)


@pytest.mark.parametrize("cls", [errors.DataFileError, errors.LoweringTableError, errors.FaultFileError])
def test_data_file_errors_name_the_file_and_the_entry(cls):
    err = cls("dir/file.yaml", "ops.aten.mm", "unknown key 'colour'")
    assert (err.source, err.entry, err.problem) == ("dir/file.yaml", "ops.aten.mm", "unknown key 'colour'")
    assert str(err) == f"malformed {cls.kind} dir/file.yaml: entry 'ops.aten.mm': unknown key 'colour'"


def test_the_device_modules_raise_the_classes_of_errors_py():
    from backend import compile as neuron_compile
    from backend import native
    from backend.neff import compiler, format, partition, runtime

    assert neuron_compile.NeuronCompileError is errors.NeuronCompileError
    assert neuron_compile.DynamicShapeError is errors.DynamicShapeError
    assert compiler.CompileError is errors.CompileError
    assert format.CorruptArtifactError is runtime.CorruptArtifactError is errors.CorruptArtifactError
    assert partition.UnsupportedGraphError is errors.UnsupportedGraphError
    assert native.Unavailable is errors.Unavailable
