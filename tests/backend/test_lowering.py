"""The lowering table is data: load, query, replace (API and env var), and clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

import backend
from backend import lowering
from backend.errors import LoweringTableError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_table():
    yield
    lowering.set_table(None)


def test_default_table_is_versioned_data_with_realistic_defaults():
    table = lowering.current_table()
    assert table.version and table.source.endswith("lowering_table.yaml")
    f32, bf16, f64 = torch.float32, torch.bfloat16, torch.float64
    assert table.supports("aten.addmm.default", [f32, f32, f32]) == (True, None)
    assert table.supports("aten.mm.out", [bf16, bf16, bf16]) == (True, None)
    assert table.supports("aten.convolution.default", [f32]) == (True, None)
    assert table.supports("aten.native_layer_norm.default", [torch.float16]) == (True, None)
    assert table.supports("aten._softmax.default", [f32]) == (True, None)
    assert table.supports("aten.embedding.default", [f32, torch.int64]) == (True, None)
    assert table.supports("aten.add_.Tensor", [f32, f32]) == (True, None)  # in-place variant
    assert table.supports("aten.masked_fill.Scalar", [f32, torch.bool]) == (True, None)
    assert table.supports("aten.addmm.default", [f64, f64, f64]) == (False, "dtype")
    assert table.supports("aten.mul.Tensor", [torch.complex64]) == (False, "dtype")
    assert table.supports("aten.nonzero.default", [f32]) == (False, "data-dependent-shape")
    assert table.supports("aten.masked_select.default", [f32, torch.bool]) == (False, "data-dependent-shape")
    assert table.supports("aten.unique_dim.default", [torch.int64]) == (False, "data-dependent-shape")
    assert table.supports("aten.index.Tensor", [f32, torch.bool]) == (False, "data-dependent-shape")
    assert table.supports("aten.index.Tensor", [f32, torch.int64]) == (True, None)
    assert table.supports("aten._linalg_svd.default", [f32]) == (False, "no-lowering")
    assert table.supports("aten.totally_made_up.default", [f32]) == (False, "no-lowering")
    assert "aten._linalg_svd" in table.not_lowered  # documented absence


def _write(tmp_path: Path, data, name="table.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_set_table_replaces_and_none_restores(tmp_path, restore_table):
    path = _write(tmp_path, {"version": "exported-1", "ops": {"aten.mm": ["float32"]}})
    table = lowering.set_table(path)
    assert lowering.current_table() is table and table.version == "exported-1"
    assert table.supports("aten.mm.default", [torch.float32]) == (True, None)
    assert table.supports("aten.mm.default", [torch.bfloat16]) == (False, "dtype")
    assert table.supports("aten.add.Tensor", [torch.float32]) == (False, "no-lowering")
    lowering.set_table(None)
    assert lowering.current_table().supports("aten.add.Tensor", [torch.float32]) == (True, None)


def test_exported_table_roundtrips_through_to_dict(tmp_path, restore_table):
    default = lowering.current_table()
    path = _write(tmp_path, json.dumps(default.to_dict()), "table.json")
    again = lowering.set_table(path)
    assert again.version == default.version
    assert again.ops == default.ops and again.data_dependent == default.data_dependent


@pytest.mark.parametrize(
    "data,entry",
    [
        ({"version": "1", "ops": {"aten.mm": ["float33"]}}, "aten.mm"),
        ({"version": "1", "ops": {"aten.mm": "float32"}}, "aten.mm"),
        ({"version": "1", "ops": {"mm": ["float32"]}}, "mm"),
        ({"version": "1", "ops": {"aten.mm": {"dtypes": ["float32"], "colour": 1}}}, "aten.mm"),
        ({"ops": {"aten.mm": ["float32"]}}, "version"),
        ({"version": "1"}, "ops"),
        ({"version": "1", "ops": {"aten.mm": ["float32"]}, "extra": 1}, "extra"),
        (
            {"version": "1", "ops": {"aten.mm": ["float32"]}, "data_dependent_shape": {"aten.mm": ""}},
            "aten.mm",
        ),
        ({"version": "1", "dtype_groups": {"f": ["float99"]}, "ops": {"aten.mm": ["f"]}}, "dtype_groups.f"),
        ("version: 1\nops: [unclosed\n", "line"),
    ],
)
def test_malformed_table_names_the_entry(tmp_path, restore_table, data, entry):
    before = lowering.current_table()
    path = _write(tmp_path, data)
    with pytest.raises(LoweringTableError) as info:
        lowering.set_table(path)
    assert entry in str(info.value) and str(path) in str(info.value)
    assert lowering.current_table() is before  # a bad file leaves the table in force


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(LoweringTableError, match="cannot read"):
        lowering.load_table(tmp_path / "nope.yaml")


def test_env_var_replaces_the_table_in_a_new_process(tmp_path):
    path = _write(tmp_path, {"version": "from-env", "ops": {"aten.mul": ["float32"]}})
    code = textwrap.dedent(
        """
        import json, torch, backend
        x = torch.ones(3, device="neuron")
        with backend.collect_fallbacks() as events:
            (x * 2) + 1
        print(json.dumps({"version": backend.lowering.current_table().version,
                          "fallbacks": sorted(e.op for e in events)}))
        """
    )
    env = {**os.environ, "NEURON_LOWERING_TABLE": str(path)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"version": "from-env", "fallbacks": ["aten.add.Tensor"]}


def test_backend_reexports_lowering():
    assert backend.lowering is lowering
