"""Every bundled rule file is read through a typed model: it loads, and an unknown key in it is an
error naming the file and the key (not a rule that silently never applies).

A YAML or TOML file added to a package without a model here fails
`test_every_rule_file_has_a_model` (harness/build's and backend's own files have their own tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from agents.catalog import HeadMappings
from agents.llm import Prompt
from agents.llm_groups import FailureCauses
from agents.partial_config import SummaryAliases
from agents.triage import TriageRules
from agents.vocabulary import TraitVocabulary
from contracts.errors import RuleFileError
from contracts.rulefiles import load_rules
from harness.blame.rules import BlameRules
from harness.engine.nightly import NightlyConfig
from harness.recording.workloads import SpecList
from harness.stages.compare import NumericsRules
from registry.constraints import OpSemantics
from registry.tolerances import ReplayTolerances
from registry.upstream.opinfos import Families
from reports.compare import MetricRules
from reports.coverage import Levels
from reports.expectations import ExpectationsFile, FlakyFile
from reports.upstream import DtypeClasses
from reports.upstream_skips import SkipList

ROOT = Path(__file__).resolve().parent.parent

#: rule file (relative to the checkout) -> its model
MODELS: dict[str, type[BaseModel]] = {
    "harness/data/numerics.yaml": NumericsRules,
    "harness/data/blame_rules.yaml": BlameRules,
    "harness/data/nightly.toml": NightlyConfig,
    "registry/data/tolerances.yaml": ReplayTolerances,
    "registry/data/op_semantics.yaml": OpSemantics,
    "registry/data/upstream_families.yaml": Families,
    "registry/data/sample_models.yaml": SpecList,
    "reports/data/expectations.yaml": ExpectationsFile,
    "reports/data/flaky.yaml": FlakyFile,
    "reports/data/levels.yaml": Levels,
    "reports/data/metrics.yaml": MetricRules,
    "reports/data/dtype_classes.yaml": DtypeClasses,
    "reports/data/upstream_skips/neuron.yaml": SkipList,
    "agents/triage_rules.yaml": TriageRules,
    "agents/catalog_heads.yaml": HeadMappings,
    "agents/data/traits.yaml": TraitVocabulary,
    "agents/data/failure_causes.yaml": FailureCauses,
    "agents/data/partial_fields.yaml": SummaryAliases,
    **{
        str(p.relative_to(ROOT)): Prompt
        for p in sorted((ROOT / "agents" / "data" / "prompts").glob("*.yaml"))
    },
}
#: rule files with models and tests of their own (shrink rules, input recipes, the device's tables)
ELSEWHERE = (
    "harness/build/",
    "backend/",
    "harness/data/shrink_rules.yaml",
    "harness/data/input_recipes.yaml",
    "harness/data/train_mode.yaml",
)


def test_every_rule_file_has_a_model():
    found = {
        str(p.relative_to(ROOT))
        for pkg in ("agents", "contracts", "harness", "registry", "reports")
        for suffix in ("*.yaml", "*.yml", "*.toml")
        for p in (ROOT / pkg).rglob(suffix)
    }
    unmodelled = sorted(f for f in found - set(MODELS) if not f.startswith(ELSEWHERE))
    assert not unmodelled, f"rule files read without a typed model: {unmodelled}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_it_loads(name):
    assert isinstance(load_rules(MODELS[name], ROOT / name), MODELS[name])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_an_unknown_key_names_the_file_and_the_key(tmp_path, name):
    src = ROOT / name
    text = src.read_text()
    if src.suffix == ".toml":
        text = "no_such_key = 1\n" + text  # before the first table: a top-level key
    elif text.lstrip().startswith("-") or name.endswith("sample_models.yaml"):
        text += "\n- {model_type: bert, no_such_key: 1}\n"  # a list of entries: one more, with a typo
    else:
        text += "\nno_such_key: 1\n"
    bad = tmp_path / src.name
    bad.write_text(text)
    with pytest.raises(RuleFileError) as info:
        load_rules(MODELS[name], bad)
    assert str(bad) in str(info.value) and "no_such_key" in str(info.value)
