"""The device's data files load into typed models; an unknown or mistyped key is an error of the
file's own class naming the file, the entry and the key."""

from __future__ import annotations

import pytest
import torch
import yaml

from backend import faults, lowering
from backend.data_files import DataModel, bundled, load_data
from backend.errors import DataFileError, FaultFileError, LoweringTableError
from backend.kernels import HostKernelGaps, _load_host_gaps
from backend.neff.partition import CompilerLowerings, compiler_equivalents
from backend.precision import PrecisionTable, matmul_class


def test_every_bundled_data_file_loads():
    assert matmul_class()["aten.mm"] == ("self", "mat2")
    assert _load_host_gaps()["aten.histc"] is torch.float32
    assert compiler_equivalents()["aten.full"] == "aten.fill"
    assert lowering.load_table().supports("aten.mm.default", [torch.float32]) == (True, None)
    assert len(faults.read_faults(faults.suite_path())) >= 25


def _copy_with(tmp_path, package, name, change) -> str:
    """A bundled file with `change` applied to its YAML content, written to tmp_path."""
    data = yaml.safe_load(bundled(package, name)[0])
    change(data)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    "model,package,name,change,entry,needle",
    [
        (
            PrecisionTable,
            "backend",
            "precision.yaml",
            lambda d: d.update(colour=1),
            "<top level>",
            "'colour'",
        ),
        (
            PrecisionTable,
            "backend",
            "precision.yaml",
            lambda d: d["matmul_class"].update({"aten.mm": "self"}),
            "matmul_class",
            "key 'aten.mm'",
        ),
        (
            HostKernelGaps,
            "backend",
            "host_kernel_gaps.yaml",
            lambda d: d["ops"]["aten.histc"].update(compute_type="float32"),
            "ops.aten.histc",
            "unknown key 'compute_type'",
        ),
        (
            HostKernelGaps,
            "backend",
            "host_kernel_gaps.yaml",
            lambda d: d.update(version="1"),
            "<top level>",
            "key 'version'",
        ),
        (
            CompilerLowerings,
            "backend.neff",
            "compiler_lowerings.yaml",
            lambda d: d.update(equivalent={}),
            "<top level>",
            "unknown key 'equivalent'",
        ),
    ],
)
def test_an_unknown_or_mistyped_key_names_file_entry_and_key(
    tmp_path, model, package, name, change, entry, needle
):
    path = _copy_with(tmp_path, package, name, change)
    with pytest.raises(DataFileError) as info:
        load_data(model, path)
    assert info.value.source == path and info.value.entry == entry
    assert path in str(info.value) and repr(entry) in str(info.value) and needle in str(info.value)


def test_the_lowering_table_raises_its_own_error_naming_the_key(tmp_path):
    path = _copy_with(
        tmp_path,
        "backend",
        "lowering_table.yaml",
        lambda d: d["ops"].update({"aten.mm": {"dtype": ["float"]}}),
    )
    with pytest.raises(LoweringTableError) as info:
        lowering.load_table(path)
    assert info.value.entry == "ops.aten.mm"
    assert info.value.problem == "unknown key 'dtype'; missing key 'dtypes'"


def test_a_fault_file_raises_its_own_error_naming_the_fault_and_the_key(tmp_path):
    path = tmp_path / "faults.yaml"
    entry = {"name": "typo", "op": "aten.mm", "kind": "nan", "when": [{"arg": "self", "dimm": 0, "min": 2}]}
    path.write_text(yaml.safe_dump({"version": 1, "faults": [entry]}))
    with pytest.raises(FaultFileError) as info:
        faults.read_faults(path)
    assert info.value.entry == "typo" and "unknown key 'when.0.dimm'" in str(info.value)
    path.write_text(yaml.safe_dump({"version": 1, "faults": [], "fault": []}))
    with pytest.raises(FaultFileError, match="unknown key 'fault'"):
        faults.read_faults(path)


def test_types_are_strict_and_models_frozen():
    class Model(DataModel):
        n: int
        xs: list[str]

    with pytest.raises(DataFileError, match="key 'n'"):
        load_data(Model, ("n: '3'\nxs: [a]\n", "inline.yaml"))
    model = load_data(Model, ("n: 3\nxs: [a]\n", "inline.yaml"))
    with pytest.raises(ValueError):
        model.n = 4


def test_unreadable_and_invalid_files_name_the_file(tmp_path):
    with pytest.raises(DataFileError, match="cannot read"):
        load_data(PrecisionTable, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("matmul_class: [unclosed\n")
    with pytest.raises(DataFileError, match="not valid YAML") as info:
        load_data(PrecisionTable, bad)
    assert info.value.entry.startswith("line ")
