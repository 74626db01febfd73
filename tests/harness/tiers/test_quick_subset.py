"""Quick subsets are chosen for coverage, not by position: the unit tier covers every (op, dtype)
before it repeats one; limited model tiers keep the models covering the most trait values and
recorded ops; `harness nightly --models CRAWL` takes its representatives from that crawl."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.records import Case, ModelSpec
from contracts.tiers import TierInputs
from harness.tiers import quick_subset
from harness.tiers.representative import RepresentativeTier
from registry.schema import Entry, Provenance
from registry.store import Registry
from registry.unit_tier import bundled_registry_path, cases, coverage_order, op_dtype


def _unit(op, dt, weight, n):
    return Case(
        case_id=f"{op}-{dt}-{n}",
        tier="unit",
        weight=weight,
        payload={"op": op, "signature": f'{{"a":[{{"T":[{n}],"dt":"{dt}"}}],"k":{{}}}}'},
    )


def test_round_robin_covers_every_op_dtype_before_repeating():
    items = [_unit("aten.mm.default", "f32", 100.0, n) for n in range(5)]
    items += [_unit("aten.mm.default", "bf16", 1.0, 1), _unit("aten.add.Tensor", "f32", 50.0, 1)]
    order = coverage_order(items)
    assert {op_dtype(c) for c in order[:3]} == {
        ("aten.mm.default", "f32"),
        ("aten.mm.default", "bf16"),
        ("aten.add.Tensor", "f32"),
    }
    assert order[0].weight == 100.0 and order == coverage_order(list(reversed(items)))  # deterministic


def test_the_bundled_registry_head_covers_every_op_dtype_first():
    listed = cases(str(bundled_registry_path()))
    groups = {op_dtype(c) for c in listed}
    head = [op_dtype(c) for c in listed[: len(groups)]]
    assert len(set(head)) == len(groups)  # no (op, dtype) repeats before all were seen
    assert {op for op, _ in head} == {c.payload["op"] for c in listed}  # every op of the registry


def _registry(tmp_path, ops_by_model):
    reg = Registry()
    for model, ops in ops_by_model.items():
        for op in ops:
            reg.add(
                Entry(
                    op,
                    f'{{"a":[],"k":{{"m":"{model}"}}}}',
                    {},
                    [],
                    [Provenance(model, "representative", "forward", "real")],
                )
            )
    return str(reg.save(tmp_path / "reg.parquet"))


def test_limited_model_tiers_take_the_models_covering_most_ops(tmp_path):
    specs = [
        ModelSpec("a", "bert", "BertModel"),
        ModelSpec("b", "bert", "BertModel", downloads=10),
        ModelSpec("c", "gpt2", "GPT2Model"),
        ModelSpec("d", "bert", "BertModel"),
    ]
    path = _registry(
        tmp_path,
        {
            "a": ["aten.mm.default"],
            "b": ["aten.mm.default", "aten.add.Tensor", "aten.gelu.default"],
            "c": ["aten.mm.default", "aten.tanh.default"],
        },
    )
    order = quick_subset.coverage_order(specs, path)
    # most new elements first (b and d tie on elements: b has more downloads); then gpt2's new traits
    assert order[0].model_id == "b" and order[1].model_id == "c"
    assert order == quick_subset.coverage_order(list(reversed(specs)), path)
    # a model the registry does not know gets the ops recorded from its type
    ops = quick_subset.ops_of(specs, quick_subset.registry_ops_by_model(path))
    assert ops[3] == {"aten.mm.default", "aten.add.Tensor", "aten.gelu.default"}
    share = quick_subset.subset_coverage(order[:1], specs, path)
    assert share["ops"] == 3 and share["registry_ops"] == 4 and share["ops_share"] == 0.75


def test_the_representative_tier_with_a_limit_lists_coverage_order_first():
    tier = RepresentativeTier()
    plain = tier.cases(TierInputs())
    limited = tier.cases(TierInputs(options={"limit": 4}))
    assert sorted(c.case_id for c in plain) == sorted(c.case_id for c in limited)
    head = [c.spec() for c in limited[:4]]
    all_specs = [c.spec() for c in plain]
    best = quick_subset.subset_coverage(head, all_specs)
    first = quick_subset.subset_coverage([c.spec() for c in plain[:4]], all_specs)
    assert best["ops"] + best["trait_elements"] >= first["ops"] + first["trait_elements"]


def _crawl(tmp_path) -> Path:
    from agents.catalog import iter_catalog
    from agents.store import write_store

    wanted = {"bert", "gpt2", "llama"}
    records = [r for r in iter_catalog(wanted) if r.status == "ok"]
    for i, r in enumerate(records):
        r.id = f"crawl/{r.id.split('/', 1)[-1]}-{i}"
        r.downloads = 1000 - i
    crawl = tmp_path / "crawl"
    write_store(crawl, records)
    return crawl


def test_nightly_models_crawl_selects_the_representatives_from_it(tmp_path):
    from agents.select import load_representatives
    from harness.engine.nightly import NightlyOptions, crawl_representatives

    crawl = _crawl(tmp_path)
    sel = crawl_representatives(NightlyOptions(out=tmp_path / "n", models=str(crawl), progress=False))
    assert sel["source"] == "crawl" and sel["dir"] == str(crawl) and sel["selected"] is True
    reps = load_representatives(crawl)
    assert reps and all(r.model_id.startswith("crawl/") for r in reps)
    again = crawl_representatives(NightlyOptions(out=tmp_path / "n", models=str(crawl), progress=False))
    assert again["selected"] is False  # a current selection is reused
    tier_cases = RepresentativeTier().cases(TierInputs(models=sel["dir"]))
    assert {c.case_id for c in tier_cases} == {r.model_id for r in reps}
    catalog = crawl_representatives(NightlyOptions(out=tmp_path / "n", progress=False))
    assert catalog["dir"] is None and catalog["source"] == "offline catalog"


@pytest.mark.slow
def test_nightly_with_a_crawl_runs_the_crawls_representatives(tmp_path):
    from harness.engine.nightly import NightlyOptions, run_nightly

    crawl = _crawl(tmp_path)
    config = tmp_path / "nightly.toml"
    config.write_text(
        '[quick]\ntiers = ["representative"]\n[quick.representative]\nlimit = 1\ntimeout = 300\n'
    )
    out = run_nightly(
        NightlyOptions(
            out=tmp_path / "n",
            quick=True,
            backend="cpu",
            models=str(crawl),
            progress=False,
            config_path=str(config),
            use_baseline=False,
        )
    )
    assert out["representatives"]["source"] == "crawl"
    rep = out["tiers"]["representative"]
    assert rep["cases"] == 1, rep
    import pandas as pd

    ids = pd.read_parquet(Path(rep["results"]))["case_id"].unique().tolist()
    assert len(ids) == 1 and ids[0].startswith("crawl/")


def test_the_workflow_selects_from_the_crawl():
    import yaml

    root = Path(__file__).resolve().parents[3]
    wf = yaml.safe_load((root / ".github/workflows/nightly.yml").read_text())
    steps = wf["jobs"]["nightly"]["steps"]
    runs = [s.get("run", "") for s in steps]
    select = next(i for i, r in enumerate(runs) if 'harness select --in "$HARNESS_CRAWL_DIR"' in r)
    nightly = next(
        i
        for i, r in enumerate(runs)
        if 'harness nightly --out runs/nightly --models "$HARNESS_CRAWL_DIR"' in r
    )
    crawl = next(i for i, r in enumerate(runs) if "harness crawl" in r)
    assert crawl < select < nightly
