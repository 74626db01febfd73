"""The row-level blame rules (harness.blame.rules): no model is run here."""

from __future__ import annotations

import pytest

from contracts.errors import RuleFileError
from contracts.records import CaseOutcome, StageResult
from contracts.rulefiles import load_rules, resource
from contracts.status import Blame
from harness.blame import rules as blame


def _outcome(tier, *rows, died=False):
    stages = [
        StageResult(
            *r[:2], reason=r[2] if len(r) > 2 else ("r" if r[1] in ("skipped", "not_attempted") else "")
        ).to_dict()
        for r in rows
    ]
    return CaseOutcome("c", tier, stages, worker={"died": "worker_crash:SIGSEGV"} if died else {})


def _blames(outcome):
    return {s["stage"]: s["blame"] for s in outcome.stages}


def test_the_rules_file_names_the_reference_and_valid_blames():
    assert (
        blame.reference_backend() == "cpu" and blame.is_reference("cpu") and not blame.is_reference("neuron")
    )
    assert blame.device_only("on_device") and not blame.device_only("forward")


@pytest.mark.parametrize(
    "row, on_neuron, on_cpu",
    [
        (("op", "fail", "mismatch: max abs err 0.5"), "backend", "harness"),
        (("op", "error", "op raised on the backend"), "backend", "harness"),
        (("op", "skipped", "cpu reference raised RuntimeError: bad shape"), "harness", "harness"),
        (
            (
                "op",
                "skipped",
                "no cpu reference: PyTorch's CPU kernel does not implement the call as recorded",
            ),
            "upstream",
            "upstream",
        ),
        (
            ("op", "skipped", "unreplayable: argument of type Generator cannot be rebuilt"),
            "harness",
            "harness",
        ),
        (("op", "error", "harness error while replaying"), "harness", "harness"),
        (("op", "pass"), "", ""),
    ],
)
def test_unit_tier_blames_by_its_builtin_cpu_reference(row, on_neuron, on_cpu):
    """A unit case replays on the CPU first: a device failure after that is the backend's, a case the
    CPU itself rejects is the harness' (it recorded or rebuilt the case wrong), unless PyTorch's CPU
    has no kernel for the call (upstream); on cpu, backend is impossible."""
    assert _blames(blame.complete_outcome(_outcome("unit", row), "neuron"))["op"] == on_neuron
    assert _blames(blame.complete_outcome(_outcome("unit", row), "cpu"))["op"] == on_cpu


@pytest.mark.parametrize(
    "reason, expected",
    [
        ("pytorch-applicability", ""),
        ("backend-unsupported", "backend"),
        ("no-native-lowering", "backend"),
        ("reference-error", "harness"),
    ],
)
def test_upstream_tier_skips_are_blamed_by_their_reason(reason, expected):
    out = blame.complete_outcome(_outcome("upstream", ("forward", "skipped", reason)), "neuron")
    assert _blames(out)["forward"] == expected
    failing = blame.complete_outcome(_outcome("upstream", ("forward", "fail", "mismatch")), "neuron")
    assert _blames(failing)["forward"] == "backend"


def test_not_attempted_rows_carry_the_blame_of_the_stage_that_stopped_them():
    rows = [
        StageResult("load", "pass").to_dict(),
        StageResult(
            "forward",
            "error",
            reason="RuntimeError: x",
            blame="upstream",
            blame_evidence={"rule": "upstream.fake_run"},
        ).to_dict(),
        StageResult("backward", "not_attempted", reason="forward error").to_dict(),
        StageResult("numerics", "not_attempted", reason="forward error").to_dict(),
        StageResult("on_device", "not_attempted", reason="backend cpu cannot report CPU fallbacks").to_dict(),
    ]
    blame.complete_stages(rows, tier="full", backend="cpu")
    assert [r["blame"] for r in rows] == ["", "upstream", "upstream", "upstream", ""]
    assert rows[2]["blame_evidence"] == {"rule": "blocked", "blocked_by": "forward"}


def test_neutral_skips_are_nobodys_failure():
    out = blame.complete_outcome(
        _outcome(
            "full",
            ("load", "pass"),
            ("forward", "pass"),
            ("backward", "skipped", "no output depends on a trainable parameter"),
        ),
        "neuron",
    )
    assert _blames(out) == {"load": "", "forward": "", "backward": ""}


def test_a_dead_worker_on_the_reference_is_the_harness_unless_killed_from_outside():
    crash = blame.complete_outcome(
        _outcome("full", ("load", "crash", "worker_crash:SIGSEGV"), died=True), "cpu"
    )
    assert _blames(crash)["load"] == "harness"
    killed = blame.complete_outcome(
        _outcome("full", ("load", "oom", "worker_killed:SIGKILL"), died=True), "cpu"
    )
    assert _blames(killed)["load"] == "environment"


def test_a_device_row_is_blamed_by_the_same_case_on_the_reference():
    device = _outcome(
        "full",
        ("load", "crash", "worker_crash:SIGSEGV"),
        ("forward", "crash", "worker_crash:SIGSEGV"),
        died=True,
    )
    reference = _outcome("full", ("load", "pass"), ("forward", "error", "TypeError: missing past_values"))
    reference.stages[1].update(blame="harness", blame_evidence={"rule": "default"})
    out = blame.complete_outcome(device, "neuron", reference=reference)
    assert _blames(out) == {"load": "backend", "forward": "harness"}
    assert out.stages[0]["blame_evidence"]["reference"]["status"] == "pass"
    assert out.stages[1]["blame_evidence"]["reference_evidence"] == {"rule": "default"}
    # without the reference re-run the row is still judged, and says why
    alone = blame.complete_outcome(
        _outcome("full", ("load", "crash", "worker_crash:SIGSEGV"), died=True), "neuron"
    )
    assert (
        _blames(alone)["load"] == "harness" and "not available" in alone.stages[0]["blame_evidence"]["note"]
    )


def test_on_device_failures_are_always_the_devices():
    assert (
        blame.by_reference("on_device", {"status": "not_attempted", "reason": "cannot report"}, "cpu")[0]
        == "backend"
    )
    assert (
        blame.by_reference(
            "on_device", {"status": "not_attempted", "reason": "cannot report"}, "cpu", "fail"
        )[0]
        == "backend"
    )


def test_a_timeout_on_the_device_and_on_the_reference_is_no_evidence_against_the_backend():
    stages = [
        ("load", "timeout", "worker_timeout"),
        ("forward", "timeout", "worker_timeout"),
        ("on_device", "timeout", "worker_timeout"),
    ]
    both = blame.complete_outcome(
        _outcome("representative", *stages, died=True),
        "neuron",
        reference=_outcome("representative", *stages, died=True),
    )
    assert set(_blames(both).values()) == {"harness"}  # the reference's verdict: its own timeout
    assert both.stages[2]["blame_evidence"]["reference"]["status"] == "timeout"
    # the reference finished the same case: the device's timeout is the device's
    finished = _outcome(
        "representative",
        ("load", "pass"),
        ("forward", "pass"),
        ("on_device", "not_attempted", "backend cpu cannot report CPU fallbacks"),
    )
    alone = blame.complete_outcome(
        _outcome("representative", *stages, died=True), "neuron", reference=finished
    )
    assert _blames(alone) == {"load": "backend", "forward": "backend", "on_device": "backend"}
    assert "finished where the device did not" in alone.stages[2]["blame_evidence"]["why"]


def test_which_outcomes_need_the_runners_reference_pass():
    assert blame.needs_reference(_outcome("full", ("load", "crash", "w"), died=True), "neuron")
    assert not blame.needs_reference(_outcome("full", ("load", "crash", "w"), died=True), "cpu")
    assert not blame.needs_reference(
        _outcome("unit", ("op", "fail", "mismatch")), "neuron"
    )  # built-in reference
    assert blame.needs_reference(
        _outcome("trivial", ("check", "fail", "mismatch")), "neuron"
    )  # a plug-in tier
    judged = _outcome("full", ("forward", "error", "x"))
    judged.stages[0]["blame"] = "backend"
    assert not blame.needs_reference(judged, "neuron")


def test_a_stage_result_rejects_an_unknown_blame():
    with pytest.raises(ValueError):
        StageResult("load", "error", blame="somebody")
    assert StageResult("load", "error", blame="upstream").to_dict()["blame"] == "upstream"


@pytest.mark.parametrize("tier", ["full", "representative"])
def test_the_harness_own_reference_failing_is_the_harness_on_any_backend(tier):
    row = ("numerics", "error", "cpu reference raised: RuntimeError: x")
    for backend in ("neuron", "cpu"):
        out = blame.complete_outcome(_outcome(tier, row), backend)
        assert _blames(out)["numerics"] == "harness"
        assert out.stages[0]["blame_evidence"]["rule"] == "harness_reasons"
        assert not blame.needs_reference(_outcome(tier, row), backend)


@pytest.mark.parametrize("reference_seconds, expected", [(5.0, "backend"), (56.0, "harness")])
def test_a_device_timeout_is_the_backends_only_when_the_reference_had_room(reference_seconds, expected):
    """Killed at 120 s on the device, the cpu re-run passed: in 5 s the device hung or crawled
    (backend); in 56 s the 2x-slower device would need about the whole limit, so the limit decided."""
    stages = ("load", "forward")
    device = CaseOutcome(
        "c",
        "full",
        [StageResult(s, "timeout", reason="worker_timeout").to_dict() for s in stages],
        seconds=120.0,
        worker={"died": "worker_timeout"},
    )
    reference = CaseOutcome(
        "c", "full", [StageResult(s, "pass").to_dict() for s in stages], seconds=reference_seconds
    )
    out = blame.complete_outcome(device, "neuron", reference=reference)
    assert _blames(out) == {"load": expected, "forward": expected}
    ev = out.stages[0]["blame_evidence"]
    assert ev["reference"]["status"] == "pass"
    if expected == "harness":
        assert ev["limit_seconds"] == 120.0 and ev["reference_seconds"] == 56.0 and "too tight" in ev["why"]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (("timeout_margin: 0.4", "timeout_margn: 0.4"), "entry (top level): unknown key 'timeout_margn'"),
        (("blame: environment,", "blam: environment,"), "entry builtin_reference.unit.3: unknown key 'blam'"),
        (("{status: [skipped], reason:", "{status: [skiped], reason:"), "unknown status ['skiped']"),
        (("  - {blame: harness, why:", "  - {blame: harnes, why:"), "entry worker_death.1: key 'blame'"),
        (
            ('  - "^pytorch-applicability"', '  - "^pytorch-(applicability"'),
            "entry neutral_reasons: key '3': Value error, not a regular expression",
        ),
        (
            ("    compare_chars: 200", "    compare_charz: 200"),
            "entry probe.same_way: unknown key 'compare_charz'",
        ),
    ],
)
def test_a_typo_in_the_blame_rules_names_file_entry_and_key(tmp_path, edit, says):
    text = resource("harness", "data/blame_rules.yaml").read_text()
    assert edit[0] in text
    path = tmp_path / "blame_rules.yaml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(RuleFileError) as info:
        load_rules(blame.BlameRules, path)
    assert str(path) in str(info.value) and says in str(info.value)


def test_the_bundled_rules_load_typed():
    r = blame.rules()
    assert r.reference_backend == "cpu" and r.probe.timeout > 0
    assert all(
        e.blame is None or isinstance(e.blame, Blame) for es in r.builtin_reference.values() for e in es
    )
    assert any(u.in_ for u in r.unset_config_patterns)  # the `in` key of a rule
