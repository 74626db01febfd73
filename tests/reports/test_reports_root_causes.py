"""The report's first screen leads with what a backend engineer acts on: pass shares per tier,
regressions, root causes (one row per op and phase), failures without one and why, and skips and
fallbacks aggregated by op, dtype and reason; compare and failure_groups.json name root causes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pyarrow.parquet as pq
import pytest

from harness.cli import main
from reports import rootcauses, summary
from reports.compare import compare_runs
from reports.tables import read_results, read_table
from tests.reports.reports_synth import ROOT_CAUSES, event_cause, set_status, with_root_causes


@pytest.fixture(autouse=True)
def no_llm(tmp_path, monkeypatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "HARNESS_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def caused_run(make_run):
    return make_run("caused", edit=with_root_causes)


def _report(run, capsys, *extra) -> tuple[dict, str]:
    assert main(["report", str(run), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out), (run / "report.html").read_text()


def _section(html: str, start: str, end: str) -> str:
    return html[html.index(start) : html.index(end, html.index(start))]


def _table(html: str, table_id: str) -> list[list[str]]:
    section = _section(html, f'id="{table_id}"', "</table>")
    rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)[1:]  # skip the header
    return [
        [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]


# ------------------------------------------------------------------------------------- first screen


def test_first_screen_order_tiers_regressions_root_causes_then_skips(caused_run, make_run, tmp_path, capsys):
    main(["baseline", "update", str(make_run("base")), "--dir", str(tmp_path / "bl")])
    capsys.readouterr()
    _, html = _report(caused_run, capsys, "--baseline", str(tmp_path / "bl"))
    ids = [
        'id="summary"',
        'id="tier-summary-table"',
        'id="regressions-table"',
        'id="root-causes-table"',
        'id="unexplained-table"',
        'id="skips-fallbacks-summary-table"',
        'id="runs"',  # the rest of the report below the first screen
        'id="levels"',
        'id="skips-fallbacks-table"',
        'id="failure-groups"',
        'id="baseline"',
        'id="backend-failures-table"',
    ]
    positions = [html.index(i) for i in ids]
    assert positions == sorted(positions)
    assert html.index("</section>") < html.index('id="runs"')  # the first screen ends before the rest


def test_tier_rows_give_pass_shares_with_denominators_and_backend_failures(caused_run, capsys):
    results = read_results(caused_run)
    rows = {t.tier: t for t in summary.tier_rows(results)}
    # representative: bert, gpt2 (numerics), vit (forward error), t5 (forward crash), all the device's
    rep = rows["representative"]
    assert (rep.passed, rep.cases, rep.failing_backend, rep.failing_other) == (0, 4, 4, 0)
    unit = rows["unit"]  # 3 pass, op3 fails (backend), op4 skipped
    assert (unit.passed, unit.cases, unit.failing_backend, unit.skipped) == (3, 5, 1, 1)
    _, html = _report(caused_run, capsys, "--no-baseline")
    table = {r[0]: r for r in _table(html, "tier-summary-table")}
    assert table["unit"][1] == "3/5 (60.0%)" and table["representative"][2] == "4"
    assert table["full"][6] == "5/6 (83.3%)"  # full tier: models that load, with their denominator
    assert table["unit"][6] == "—"  # no levels for an op-level tier


def test_skips_are_aggregated_by_op_dtype_and_reason_not_one_row_per_sample(make_run, capsys):
    def upstream_samples(rows):
        for i in range(40):
            for stage in ("forward", "backward"):
                rows.append(
                    dict(
                        tier="upstream",
                        case_id=f"exp/int64/{i}",
                        stage=stage,
                        status="skipped",
                        reason="no-native-lowering",
                        op="exp",
                        dtype="int64",
                        variant="",
                        sample=i,
                        blame="backend",
                    )
                )
        for i in range(5):
            rows.append(
                dict(
                    tier="upstream",
                    case_id=f"log_softmax:with_dtype/bfloat16/{i}",
                    stage="forward",
                    status="skipped",
                    reason="no-native-lowering",
                    op="log_softmax",
                    variant="with_dtype",
                    dtype="bfloat16",
                    sample=i,
                    blame="backend",
                )
            )

    run = make_run("up", edit=upstream_samples)
    groups = summary.skips_and_fallbacks(read_results(run), read_table(run, "fallbacks"))
    skipped = {(g.op, g.dtype, g.reason): g for g in groups if g.kind == "skipped"}
    exp = skipped[("exp", "int64", "no-native-lowering")]
    assert (exp.cases, exp.rows, exp.stages) == (40, 80, ["forward", "backward"])
    assert skipped[("log_softmax.with_dtype", "bfloat16", "no-native-lowering")].cases == 5
    fallbacks = {g.op: g for g in groups if g.kind == "fallback"}
    assert (fallbacks["aten::foo"].cases, fallbacks["aten::foo"].models, fallbacks["aten::foo"].calls) == (
        1,
        2,
        3,
    )

    _, html = _report(run, capsys, "--no-baseline")
    first = _section(html, 'id="summary"', "</section>")
    rows = _table(first, "skips-fallbacks-summary-table")
    assert ["skipped", "exp", "int64", "no-native-lowering", "upstream", "40", "0", ""] in rows
    assert ["fallback", "aten::foo", "float32", "no lowering", "full", "1", "2", "3"] in rows
    assert "exp/int64/" not in first  # no sample has a row of its own on the first screen
    rest = html[html.index('id="backend-failures"') :]
    assert "<details>" in rest and "exp/int64/7" in rest  # ... the per-sample rows are kept, collapsed


def test_root_cause_table_one_row_per_op_and_phase(caused_run, capsys):
    groups = rootcauses.root_cause_groups(read_results(caused_run))
    by_key = {(g.op, g.phase): g for g in groups}
    assert set(by_key) == {
        ("aten.gelu.default", "forward"),
        ("aten.gelu_backward.default", "backward"),
        ("aten.addmm.default", "compiled"),
        ("aten.mm.default", "forward"),
        ("aten.bmm.default", "forward"),
    }
    gelu = by_key[("aten.gelu.default", "forward")]  # two cases share one op
    assert (gelu.cases, gelu.models, gelu.downloads) == (["rep/bert", "rep/gpt2"], 2, 1500.0)
    assert "max abs 0.04" in gelu.largest_error  # rep/gpt2's, the larger of the two
    assert (gelu.repro, gelu.repro_verified, gelu.repros_verified) == ("repros/test_gelu.py", True, 1)
    assert by_key[("aten.addmm.default", "compiled")].routes == ["compiled_shadow"]
    assert by_key[("aten.bmm.default", "forward")].kinds == ["crash"]
    assert by_key[("aten.mm.default", "forward")].largest_error == "RuntimeError: bad kernel"
    assert groups[0].op == "aten.gelu_backward.default"  # full/a stands for 3 models: it leads

    out, html = _report(caused_run, capsys, "--no-baseline")
    assert [(r["op"], r["phase"], r["cases"]) for r in out["root_causes"]][:2] == [
        ("aten.gelu_backward.default", "backward", 1),
        ("aten.gelu.default", "forward", 2),
    ]
    rows = {(r[0].split()[0], r[1].split()[0]): r for r in _table(html, "root-causes-table")}
    gelu_row = rows[("aten.gelu.default", "forward")]
    assert gelu_row[0] == "aten.gelu.default rep/bert, rep/gpt2"  # the op and the cases it explains
    assert gelu_row[2:5] == ["2", "2", "1,500"]
    assert "encoder.layer.3.attention.self" in gelu_row[6] and "modeling_bert.py:255" in gelu_row[6]
    assert gelu_row[7].startswith("repros/test_gelu.py verified") and "(1/2 verified)" in gelu_row[7]


def test_failures_without_a_root_cause_are_listed_after_with_why_not(caused_run, capsys):
    rest = rootcauses.unexplained(read_results(caused_run))
    why = {(u.tier, u.stage, u.status): u.why for u in rest}
    assert why[("full", "load", "timeout")] == (
        "the localization time limit (60 s) was reached (gave up: time limit)"
    )  # a case that exceeded the time limit says so
    assert why[("unit", "op", "fail")].startswith("not localized: an op-level case")
    # on_device fallbacks are fallbacks, not wrong calls: named as such, their ops aggregated elsewhere
    assert why[("representative", "on_device", "fail")].startswith("a CPU fallback")
    assert not any(u.cases == ["rep/bert"] for u in rest)  # localized rows are not listed again
    _, html = _report(caused_run, capsys, "--no-baseline")
    assert html.index('id="root-causes-table"') < html.index('id="unexplained-table"')
    rows = _table(html, "unexplained-table")
    assert ["full", "load", "timeout", "1", "1"] == rows[
        [r[:3] for r in rows].index(["full", "load", "timeout"])
    ][:5]


def test_a_clean_run_says_no_root_cause_and_no_backend_failure(make_run, capsys):
    def clean(rows):
        for r in rows:
            if r["status"] not in ("pass", "skipped"):
                r.update(status="pass", reason="", error_class="", message="")

    run = make_run("clean", edit=clean, events=[])
    out, html = _report(run, capsys, "--no-baseline")
    assert out["root_causes"] == [] and out["unexplained_failures"] == 0
    first = _section(html, 'id="summary"', "</section>")
    assert "No failure was localized to an op call." in first
    assert "Every backend failure has a root cause." in first
    assert "No op fell back and nothing was skipped because of the backend." in first


def test_a_run_without_the_root_cause_columns_still_renders(caused_run, capsys):
    for d in [caused_run]:
        path = d / "results.parquet"
        table = pq.read_table(path)
        keep = [c for c in table.column_names if c not in ("root_cause", "root_cause_op")]
        pq.write_table(table.select(keep).replace_schema_metadata(table.schema.metadata), path)
    results = read_results(caused_run)
    assert "root_cause" not in results
    out, html = _report(caused_run, capsys, "--no-baseline")
    assert out["root_causes"] == []
    why = {(u.tier, u.stage): u.why for u in rootcauses.unexplained(results)}
    assert why[("representative", "numerics")] == "not localized: the run has no root-cause column"
    assert "No failure was localized to an op call." in html


def test_an_unreadable_record_is_a_reason_not_a_crash():
    rc = rootcauses.parse("{not json")
    assert rc is not None and not rc.found and rc.why.startswith("unreadable root-cause record")
    assert rootcauses.parse(None) is None and rootcauses.parse(float("nan")) is None


# ------------------------------------------------------------------------------------------ compare


def test_compare_names_the_root_cause_of_each_regression(caused_run, make_run, capsys):
    baseline = make_run("base")
    result = compare_runs(caused_run, baseline, expectations=[], flaky=[])
    fails = {(v.case_id, v.stage): v for v in result.verdicts if v.verdict.value == "FAIL"}
    gelu = fails[("rep/bert", "numerics")]
    assert gelu.root_cause["op"] == "aten.gelu.default" and gelu.root_cause_stage == "numerics"
    assert fails[("full/d", "compile")].root_cause["phase"] == "compiled"

    assert main(["compare", str(caused_run), str(baseline), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    by_case = {(r["case_id"], r["stage"]): r for r in out["new_failures"]}
    assert by_case[("full/a", "backward")]["root_cause"]["op"] == "aten.gelu_backward.default"
    assert by_case[("full/a", "backward")]["root_cause"]["repro_verified"] is True
    assert all("root_cause" in r for r in out["gated"])
    gated = {(r["case_id"], r["stage"]): r for r in out["gated"]}
    assert gated[("rep/t5", "forward")]["root_cause"]["route"] == "call_journal"

    assert main(["compare", str(caused_run), str(baseline)]) == 1
    text = capsys.readouterr().out
    line = text.index("representative/rep/gpt2 [numerics]")
    assert text[line:].splitlines()[1].strip() == (
        "root cause: aten.gelu.default (forward, mismatch, eager_shadow) in encoder.layer.3.attention.self; "
        "repro repros/test_gelu_2.py (not verified: passes on the device)"
    )


def test_a_stage_not_attempted_is_explained_by_the_failure_that_stopped_it(make_run):
    baseline = make_run("base")

    def forward_error(rows):
        record = event_cause("aten.mm.default", "error", "eager_shadow", error_class="RuntimeError")
        set_status(
            rows,
            "rep/bert",
            "forward",
            "error",
            error_class="RuntimeError",
            blame="backend",
            root_cause=record,
        )
        for stage in ("backward", "compile", "numerics", "on_device"):
            set_status(rows, "rep/bert", stage, "not_attempted", "an earlier stage failed")
        set_status(rows, "full/a", "forward", "error", error_class="RuntimeError", blame="backend")

    result = compare_runs(make_run("run", edit=forward_error), baseline, expectations=[], flaky=[])
    v = {(v.case_id, v.stage): v for v in result.verdicts}
    assert v[("rep/bert", "numerics")].root_cause["op"] == "aten.mm.default"
    assert v[("rep/bert", "numerics")].root_cause_stage == "forward"
    assert v[("full/a", "forward")].root_cause is None  # no record: nothing invented
    assert v[("rep/gpt2", "forward")].root_cause is None


def test_regressions_on_the_first_screen_name_their_root_cause(caused_run, make_run, tmp_path, capsys):
    main(["baseline", "update", str(make_run("base")), "--dir", str(tmp_path / "bl")])
    capsys.readouterr()
    _, html = _report(caused_run, capsys, "--baseline", str(tmp_path / "bl"))
    rows = {(r[2], r[3]): r for r in _table(html, "regressions-table")}
    assert rows[("rep/gpt2", "numerics")][6] == "aten.gelu.default (forward) · repro not verified"
    assert rows[("full/d", "compile")][6] == "aten.addmm.default (compiled) · repro verified"


# ----------------------------------------------------------------------------------- failure groups


def test_failure_groups_by_root_cause_first_then_the_rules(caused_run, capsys):
    _report(caused_run, capsys, "--no-baseline")
    data = json.loads((caused_run / "failure_groups.json").read_text())
    sources = [g["source"] for g in data["groups"]]
    n_rc = sources.count("root_cause")
    assert n_rc == 5 and sources[:n_rc] == ["root_cause"] * n_rc and "rules" in sources[n_rc:]
    first = data["groups"][0]
    assert (first["op"], first["phase"], first["count"]) == ("aten.gelu.default", "forward", 2)
    assert first["root_cause"] == "aten.gelu.default (forward)" and first["members"] == [
        "rep/bert",
        "rep/gpt2",
    ]
    assert first["repro"] == "repros/test_gelu.py" and first["repro_verified"] is True
    localized = [key for key, (*_, record) in ROOT_CAUSES.items() if record["found"]]
    assert sum(g["count"] for g in data["groups"][:n_rc]) == len(localized) == 6
    rule_members = {m for g in data["groups"][n_rc:] for m in g["members"]}
    assert "full/g" in rule_members  # the timeout has no root cause: grouped by the rules
    assert not rule_members & {"rep/bert", "full/a", "rep/vit", "rep/t5"}  # localized: not grouped twice
    failing = read_results(caused_run)["status"].isin(["fail", "error", "timeout", "oom", "crash"]).sum()
    assert data["failures"] == failing  # every failing row is in exactly one group


@pytest.mark.chromium
def test_first_screen_in_headless_chromium(caused_run, tmp_path, capsys):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        pytest.skip("needs a headless chromium binary (apt-get install chromium); .ci/run installs it")
    _report(caused_run, capsys, "--no-baseline")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    cmd += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    cmd += [f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", (caused_run / "report.html").as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=180).stdout
    text = " ".join(re.sub(r"<[^>]+>", " ", dom).split())
    order = [
        "Pass shares per tier",
        "3/5 (60.0%)",  # the unit tier's pass share with its denominator
        "Regressions against the baseline",
        "Root causes",
        "aten.gelu_backward.default full/a backward",
        "Backend failures without a root cause",
        "the localization time limit (60 s) was reached",
        "Skips and fallbacks by op, dtype and reason",
        "aten::_cdist_forward",
    ]
    positions = [text.index(t) for t in order]
    assert positions == sorted(positions)
