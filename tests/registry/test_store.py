"""The Parquet registry: exact round trip, schema version, stable merge and dedupe, diff."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from registry.errors import RegistryFormatError
from registry.schema import METADATA_KEY, SCHEMA_VERSION, Entry, Provenance
from registry.store import Registry


def _entry(
    op="aten.neg.default",
    sig='{"a":[{"T":[3],"dt":"f32"}],"k":{}}',
    model="m1",
    count=2,
    phase="forward",
    weight=5.0,
    constraints=None,
):
    return Entry(
        op,
        sig,
        constraints or {},
        [{"T": [3], "dt": "f32"}],
        [Provenance(model, "representative", phase, "real", weight, count)],
    )


def test_save_load_round_trips_exactly(tmp_path, bert_registry):
    path = bert_registry.save(tmp_path / "r.parquet")
    loaded = Registry.load(path)
    assert loaded == bert_registry
    assert [e.to_row() for e in loaded] == [e.to_row() for e in bert_registry]


def test_file_carries_schema_version_and_is_readable_without_the_harness(tmp_path, bert_registry):
    path = bert_registry.save(tmp_path / "r.parquet")
    table = pq.read_table(path)
    assert table.schema.metadata[METADATA_KEY] == str(SCHEMA_VERSION).encode()
    df = table.to_pandas()
    assert len(df) == len(bert_registry) and df["case_id"].is_unique
    assert (df["count"] > 0).all()


def test_other_schema_version_is_refused_with_both_versions(tmp_path, bert_registry):
    path = bert_registry.save(tmp_path / "r.parquet")
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: b"99"}), path)
    with pytest.raises(RegistryFormatError, match=r"version 99.*version 1"):
        Registry.load(path)


def test_not_a_registry_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_text("not parquet")
    with pytest.raises(RegistryFormatError, match="not a Parquet file"):
        Registry.load(bad)
    with pytest.raises(FileNotFoundError):
        Registry.load(tmp_path / "missing.parquet")


def test_same_signature_dedupes_with_provenance_of_both_models():
    reg = Registry([_entry(model="m1", count=2, weight=5.0), _entry(model="m2", count=3, weight=7.0)])
    (e,) = list(reg)
    assert e.models == ["m1", "m2"] and e.count == 5 and e.weight == 12.0


def test_merge_is_commutative_and_idempotent():
    a = Registry([_entry(model="m1"), _entry(op="aten.abs.default", model="m1")])
    b = Registry([_entry(model="m2", phase="backward"), _entry(model="m1", count=4)])
    ab = Registry(list(a)).merge(Registry(list(b)))
    ba = Registry(list(b)).merge(Registry(list(a)))
    assert ab == ba
    assert Registry(list(ab)).merge(Registry(list(b))) == ab  # merging again changes nothing
    (neg,) = [e for e in ab if e.op == "aten.neg.default"]
    assert neg.count == 4 + 2  # m1/forward: max(2, 4) (a re-recording), m2/backward: 2


def test_semantic_constraints_win_over_observed_ones():
    sem = {"a.1": {"kind": "index", "low": 0, "high": 10, "source": "semantics"}}
    obs = {"a.1": {"kind": "range", "low": 2, "high": 5, "source": "observed"}}
    for first, second in ((sem, obs), (obs, sem)):
        reg = Registry([_entry(constraints=first), _entry(model="m2", constraints=second)])
        assert next(iter(reg)).constraints == sem


def test_diff_names_added_and_removed_ops_and_signatures():
    old = Registry([_entry(), _entry(op="aten.abs.default")])
    new = Registry([_entry(), _entry(op="aten.exp.default")])
    d = new.diff(old).to_dict()
    assert d == {
        "signatures_added": 1,
        "signatures_removed": 1,
        "ops_added": ["aten.exp.default"],
        "ops_removed": ["aten.abs.default"],
    }


def test_bundled_registry_is_a_valid_registry_at_scale():
    """The registry shipped for the unit tier (rebuilt by `harness registry regenerate`)."""
    from registry.unit_tier import bundled_registry_path

    path = bundled_registry_path()
    if not path.is_file():
        pytest.skip("no bundled registry in this checkout")
    table = pq.read_table(path, columns=["case_id", "op"])
    assert table.schema.metadata[METADATA_KEY] == str(SCHEMA_VERSION).encode()
    ids = table.column("case_id").to_pylist()
    assert len(ids) == len(set(ids)) >= 10_000
