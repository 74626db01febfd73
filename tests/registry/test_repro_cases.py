"""Repro cases in the registry: concrete values built exactly (any layout), never scaled nor varied,
a `run: compiled` signature, the repro column (round trip, merge, older files), first in the unit
tier, one standalone file per case."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from registry import boundaries, scaling, unit_tier
from registry.encoding import encode_values, run_of, signature
from registry.export_tests import export_tests, file_name
from registry.inputs import build_tensor
from registry.schema import ARROW_SCHEMA, METADATA_KEY, SCHEMA_VERSION, Entry, Provenance
from registry.store import Registry

SIG = '{"a":[{"T":[2,3],"dt":"i64"}],"k":{}}'


def _values(t: torch.Tensor) -> dict:
    return {"kind": "values", "values": encode_values(t), "source": "repro"}


def _repro(run="r1", case="c1", stage="numerics") -> dict:
    return {
        "run": run,
        "case": case,
        "stage": stage,
        "tier": "representative",
        "model": "m",
        "backend": "neuron",
    }


@pytest.mark.parametrize(
    "enc",
    [
        {"T": [2, 3], "dt": "i64"},  # contiguous
        {"T": [3, 2], "dt": "i64", "st": [1, 3]},  # transposed
        {"T": [2, 3], "dt": "i64", "st": [0, 1]},  # expanded: rows share storage
        {"T": [2, 2], "dt": "i64", "st": [3, 1], "off": 1},  # a window into a larger storage
    ],
)
def test_concrete_values_are_built_exactly_in_any_layout(enc):
    shape = enc["T"]
    want = torch.arange(shape[0] * shape[1]).reshape(shape) * 7 % 11
    if enc.get("st") == [0, 1]:
        want = want[:1].expand(shape)  # an expanded tensor's rows are equal
    built = build_tensor(enc, _values(want), torch.Generator().manual_seed(0))
    assert torch.equal(built.cpu, want) and list(built.cpu.stride()) == list(enc.get("st") or [shape[1], 1])
    assert torch.equal(built.to(torch.device("cpu")), want)


def test_floats_round_trip_with_their_non_finite_values():
    t = torch.tensor([[0.1, float("-inf")], [float("nan"), 3.0]], dtype=torch.bfloat16)
    built = build_tensor({"T": [2, 2], "dt": "bf16"}, _values(t), torch.Generator())
    assert torch.equal(built.cpu.isnan(), t.isnan()) and torch.equal(built.cpu.nan_to_num(), t.nan_to_num())


def test_a_case_with_concrete_values_is_never_scaled_nor_varied():
    enc = {"T": [512, 1024], "dt": "i64"}
    constraints = {"a.0": {"kind": "values", "values": [0] * (512 * 1024)}}
    fitted = scaling.fit(torch.ops.aten.neg.default, [enc], {}, constraints, limit=16384)
    assert fitted[3] == 1 and fitted[0] == [enc]  # as it failed, within the hard cap
    mask = {"T": [4], "dt": "b8"}
    variants = boundaries.variants([mask], {}, {"a.0": _values(torch.tensor([True, False, True, False]))})
    assert [name for name, _ in variants] == [boundaries.BASE]  # no all-true / all-false variants
    plain = boundaries.variants([mask], {}, {})
    assert len(plain) == 3


def test_a_compiled_call_is_another_case_than_the_same_call_eager():
    eager, compiled = signature([1], {}), signature([1], {}, "compiled")
    assert run_of(eager) == "" and run_of(compiled) == "compiled" and eager != compiled
    with pytest.raises(ValueError):
        signature([1], {}, "sometimes")


def test_the_repro_column_round_trips_and_merges_once_per_run_case_and_stage(tmp_path):
    prov = [Provenance("m", "representative", "forward", "repro", 1.0, 1)]
    a = Entry("aten.neg.default", SIG, {}, [], prov, repro=[_repro()])
    b = Entry("aten.neg.default", SIG, {}, [], prov, repro=[_repro(), _repro(run="r2")])
    reg = Registry([a, b])
    (entry,) = list(reg)
    assert [r["run"] for r in entry.repro] == ["r1", "r2"]
    path = reg.save(tmp_path / "r.parquet")
    assert Registry.load(path) == reg
    assert json.loads(pq.read_table(path).column("repro")[0].as_py())[0]["case"] == "c1"


def test_a_repro_merged_into_an_entry_of_the_same_call_keeps_its_concrete_values():
    sig = '{"a":[{"T":[4,3],"dt":"f32"},{"T":[2],"dt":"i64"}],"k":{}}'
    semantics = {"a.1": {"kind": "index", "low": 0, "high": 4, "source": "semantics"}}
    recorded = Entry(
        "aten.embedding.default", sig, semantics, [], [Provenance("m", "full", "forward", "real", 1.0, 3)]
    )
    concrete = {"a.1": _values(torch.tensor([3, 0]))}
    repro = Entry(
        "aten.embedding.default", sig, concrete, [], [Provenance("m", "full", "forward", "repro", 1.0, 1)]
    )
    for first, second in ((recorded, repro), (repro, recorded)):  # whatever the order
        (entry,) = list(Registry([first, second]))
        assert entry.constraints == concrete and len(entry.provenance) == 2


def test_a_registry_written_before_the_repro_column_still_loads(tmp_path):
    old = pa.schema([f for f in ARROW_SCHEMA if f.name != "repro"])
    row = Entry(
        "aten.neg.default", SIG, {}, [], [Provenance("m", "full", "forward", "real", 1.0, 2)]
    ).to_row()
    row.pop("repro")
    table = pa.Table.from_pylist([row], schema=old).replace_schema_metadata(
        {METADATA_KEY: str(SCHEMA_VERSION).encode()}
    )
    pq.write_table(table, tmp_path / "old.parquet")
    (entry,) = list(Registry.load(tmp_path / "old.parquet"))
    assert entry.repro == [] and entry.count == 2


def test_repro_cases_come_first_in_the_unit_tier_so_any_limit_keeps_them(tmp_path, bert_registry):
    repro = Entry(
        "aten.neg.default",
        '{"a":[{"T":[5],"dt":"f32"}],"k":{}}',
        {},
        [{"T": [5], "dt": "f32"}],
        [Provenance("m", "representative", "forward", "repro", 0.0, 1)],
        repro=[_repro()],
    )
    path = Registry([*bert_registry, repro]).save(tmp_path / "r.parquet")
    cases = unit_tier.cases(str(path))
    assert cases[0].case_id == repro.case_id and len(cases) == len(bert_registry) + 1


def test_export_writes_one_file_per_case_for_repros(tmp_path):
    ids = torch.tensor([[1, 0, 2], [2, 2, 0]])
    e = Entry("aten.neg.default", SIG, {"a.0": _values(ids)}, [{"T": [2, 3], "dt": "i64"}])
    c = Entry("aten.neg.default", signature([{"T": [2, 3], "dt": "f32"}], {}, "compiled"), {}, [])
    summary = export_tests(Registry([e, c]), tmp_path, backend="cpu", per_case=True)
    names = sorted(p.rsplit("/", 1)[1] for p in summary["files"])
    assert names == sorted([file_name(e.op, e.case_id), file_name(c.op, c.case_id)]) and summary["cases"] == 2
    text = (tmp_path / file_name(c.op, c.case_id)).read_text()
    assert (
        "'run': 'compiled'" in text
        and "'kind': 'values'" in (tmp_path / file_name(e.op, e.case_id)).read_text()
    )
