"""The bottom layer: vocabularies, records, settings, the backend registry and the error classifier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contracts import backends, settings, tiers
from contracts.errors import classify
from contracts.records import Case, CaseOutcome, FallbackRow, ModelSpec, ResultRow, StageResult, column_names
from contracts.status import (
    FAILING,
    FAILING_VALUES,
    NEUTRAL,
    OK,
    UNFINISHED,
    Blame,
    Status,
    UpstreamSkip,
    Verdict,
    headline_status,
)

ROOT = Path(__file__).resolve().parents[2]


def test_status_sets_partition_the_vocabulary():
    assert UNFINISHED | {Status.FAIL} == FAILING
    assert FAILING | NEUTRAL | {Status.PASS} == set(Status) and not FAILING & NEUTRAL
    assert {Status.PASS, Status.SKIPPED} == OK
    assert {"fail", "error", "timeout", "oom", "crash"} == FAILING_VALUES


def test_the_blame_and_upstream_skip_vocabularies_have_one_home():
    assert [b.value for b in Blame] == ["backend", "upstream", "environment", "harness"]
    assert [u.value for u in UpstreamSkip] == [
        "pytorch-applicability",
        "backend-unsupported",
        "no-native-lowering",
        "reference-error",
    ]
    assert [v.value for v in Verdict] == [
        "PASS",
        "FAIL",
        "XFAIL",
        "IMPROVED",
        "MISSING",
        "FLAKY",
        "FALLBACK_REGRESSION",
    ]


@pytest.mark.parametrize(
    "stages, expected",
    [
        (["pass", "skipped", "pass"], "pass"),
        (["skipped"], "skipped"),
        ([], "pass"),
        (["pass", "not_attempted", "fail"], "not_attempted"),
        (["pass", "oom", "fail"], "oom"),
    ],
)
def test_headline_status_is_the_first_stage_that_is_neither_pass_nor_skipped(stages, expected):
    assert headline_status(stages) == expected
    outcome = CaseOutcome(
        "c", "t", [StageResult(f"s{i}", s, reason="r").to_dict() for i, s in enumerate(stages)]
    )
    assert outcome.status == expected


def test_a_model_case_carries_its_spec():
    spec = ModelSpec("org/m", "bert", "BertModel", {"hidden_size": 8}, downloads=5)
    case = Case.for_spec(spec, "full", info={"signature": "abc"})
    assert (case.case_id, case.model_ids, case.weight) == ("org/m", ["org/m"], 5.0)
    assert case.spec() == spec and case.payload["info"] == {"signature": "abc"}
    assert ModelSpec.from_dict({"model_id": "x", "model_type": "gpt2", "unknown": 1}) == ModelSpec(
        "x", "gpt2"
    )


def test_the_row_records_are_the_tables_columns():
    from reports.schema import FALLBACKS, RESULTS, required_columns

    assert column_names(ResultRow) == [c.name for c in RESULTS.columns]
    assert column_names(FallbackRow) == [c.name for c in FALLBACKS.columns]
    assert required_columns(RESULTS) == ["run_id", "tier", "case_id", "stage", "status"]
    for name in ("blame", "blame_evidence", "op", "dtype", "variant", "sample"):
        assert not next(c for c in RESULTS.columns if c.name == name).required
    assert "model_frame" in column_names(FallbackRow)


def test_settings_resolve_each_variable_with_one_rule(tmp_path):
    s = settings.Settings.from_env(
        {
            "HARNESS_REGISTRY": str(tmp_path / "r.parquet"),
            "HARNESS_REPLAY_MAX_NUMEL": "7",
            "HARNESS_CACHE_DIR": str(tmp_path),
        }
    )
    assert s.registry == tmp_path / "r.parquet" and s.replay_max_numel == 7 and s.cache_dir == tmp_path
    empty = settings.Settings.from_env({})
    assert (
        empty.registry is None and empty.baseline_dir == Path.cwd() / "baseline" and empty.backend == "neuron"
    )
    with pytest.raises(ValueError, match="HARNESS_REPLAY_MAX_NUMEL"):
        _ = settings.Settings.from_env({"HARNESS_REPLAY_MAX_NUMEL": "lots"}).replay_max_numel


def test_every_setting_in_the_table_is_a_property_that_reads_its_variable():
    """The docstring's table is the settings' documentation: each row names a property of
    `Settings`, and setting that variable changes what the property returns."""
    import re

    rows = re.findall(r"^\| (HARNESS_[A-Z_]+) \| (\w+) \|", settings.__doc__, re.M)
    assert len(rows) >= 15
    for var, name in rows:
        assert isinstance(getattr(settings.Settings, name, None), property), name
        default = getattr(settings.Settings.from_env({}), name)
        if isinstance(default, bool):  # a switch: on unless it says off
            assert default is True and getattr(settings.Settings.from_env({var: "off"}), name) is False, var
        elif isinstance(default, (int, float)):
            assert getattr(settings.Settings.from_env({var: "7"}), name) == 7, var


def test_limits_explicit_then_the_tiers_then_the_default():
    class Tier:
        timeout, max_cases_per_worker = 5.0, 7

    assert settings.resolve_limits(Tier(), 9.0, None) == (9.0, 7)
    assert settings.resolve_limits(Tier()) == (5.0, 7)
    assert settings.resolve_limits(object()) == (
        settings.DEFAULT_CASE_TIMEOUT,
        settings.DEFAULT_MAX_CASES_PER_WORKER,
    )


def test_optional_tier_members_are_read_through_one_accessor_with_declared_defaults():
    class Bare:
        name, stages = "bare", ("case",)

    class Full(Bare):
        chunk_size, reference_rerun = 8, False

        def setup(self, backend):
            return backend

        def execute_many(self, cases, backend):
            return []

    assert {n: tiers.tier_option(Bare(), n) for n in tiers.TIER_DEFAULTS} == tiers.TIER_DEFAULTS
    assert tiers.tier_option(Full(), "reference_rerun") is False
    assert all(tiers.tier_hook(Bare(), n) is None for n in tiers.TIER_HOOKS)
    assert tiers.tier_hook(Full(), "setup")("cpu") == "cpu" and tiers.tier_hook(Full(), "summarize") is None
    assert (tiers.tier_chunk_size(Bare()), tiers.tier_chunk_size(Full())) == (1, 8)
    with pytest.raises(KeyError):
        tiers.tier_option(Full(), "chunksize")  # a misspelt option is an error, not a default
    with pytest.raises(KeyError):
        tiers.tier_hook(Full(), "execute")  # required, not optional


def test_backends_are_found_by_name_and_declare_what_they_can_do():
    cpu = backends.get_backend("cpu")
    assert (
        isinstance(cpu, backends.Backend)
        and cpu.reports_fallbacks is False
        and cpu.precision_mode() == "exact"
    )
    assert "neuron" in backends.backend_names()  # the bundled adapter, through the entry point
    neuron = backends.get_backend("neuron")
    assert (
        isinstance(neuron, backends.Backend)
        and neuron.simulated is True
        and neuron.compile_backend == "neuron"
    )
    with pytest.raises(ValueError, match="MODULE:DEVICE"):
        backends.get_backend("no-such-backend")


def test_register_backend_plugs_in_an_adapter():
    fake = backends.TorchDeviceBackend("fake", "cpu", reports_fallbacks=False)
    backends.register_backend("fake-for-test", lambda name: fake)
    try:
        assert backends.get_backend("fake-for-test") is fake
        assert backends.resolved_backend("fake-for-test") is fake
    finally:
        backends._REGISTERED.pop("fake-for-test")
        backends._CACHE.pop("fake-for-test", None)


def test_module_device_without_its_own_adapter_gets_a_generic_one(tmp_path, monkeypatch):
    (tmp_path / "plain_device_mod.py").write_text("DEVICE = 'cpu'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    adapter = backends.get_backend("plain_device_mod:cpu")
    assert adapter.name == "plain_device_mod:cpu" and adapter.reports_fallbacks is False
    with adapter.track_fallbacks() as events:
        pass
    assert events == []


def test_one_classifier_for_every_path():
    assert classify(TimeoutError("slow")).status is Status.TIMEOUT
    assert classify(MemoryError()).status is Status.OOM
    assert classify(RuntimeError("CUDA out of memory. Tried")).status is Status.OOM
    assert classify(RuntimeError("can't allocate memory: you tried")).status is Status.OOM
    info = classify(RuntimeError("aten::nonzero failed at 0x7f3a for /tmp/x/y"))
    assert info.status is Status.ERROR and info.failing_op == "aten.nonzero" and "0x?" in info.message


def test_contracts_import_without_torch():
    code = (
        "import sys, contracts.status, contracts.records, contracts.settings, contracts.errors, "
        "contracts.backends, reports.schema; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_case_rows_carry_the_columns_the_blame_rules_fill():
    from contracts.rows import case_rows, result_row

    stages = [
        dict(
            StageResult("op", Status.FAIL, reason="mismatch").to_dict(),
            blame="backend",
            blame_evidence={"cpu": "pass"},
        )
    ]
    out = CaseOutcome(
        "add/f32/0", "upstream", stages, info={"op": "add", "dtype": "float32", "variant": "", "sample": 0}
    )
    (row,) = case_rows(out, "r1").rows
    assert (row.blame, row.blame_evidence, row.op, row.dtype, row.variant, row.sample) == (
        "backend",
        '{"cpu": "pass"}',
        "add",
        "float32",
        "",
        0,
    )
    with pytest.warns(UserWarning, match="unknown blame"):
        bad = result_row(
            {"tier": "t", "case_id": "c", "stage": "s", "status": "fail", "blame": "cosmic rays"}, "r"
        )
    assert bad.blame is None and "cosmic rays" in bad.extra
    with pytest.warns(UserWarning, match="unknown status"):
        assert (
            result_row({"tier": "t", "case_id": "c", "stage": "s", "status": "weird"}, "r").status == "error"
        )
    with pytest.raises(ValueError, match="lacks"):
        result_row({"tier": "t", "case_id": "c", "status": "pass"}, "r")
