"""harness report groups a run's failures by probable root cause: RUNDIR/failure_groups.json and an
HTML table."""

from __future__ import annotations

import json
import re

import pytest

from harness.cli import main
from tests.fakes.openai_server import FakeOpenAI
from tests.reports.reports_synth import set_status

LLM_ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "HARNESS_LLM_MODEL", "HARNESS_LLM_MAX_RETRIES")
NO_KERNEL = dict(error_class="NotImplementedError", failing_op="aten::foo")


@pytest.fixture(autouse=True)
def no_llm(tmp_path, monkeypatch):
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))


def two_missing_kernels(rows):
    """rep/vit and rep/t5 fail at forward on the same missing kernel (messages differ only by address)."""
    set_status(rows, "rep/vit", "forward", "error", message="no kernel for aten::foo at 0x7f00", **NO_KERNEL)
    set_status(rows, "rep/t5", "load", "pass")
    set_status(rows, "rep/t5", "forward", "error", message="no kernel for aten::foo at 0x7fab", **NO_KERNEL)


def report(run, capsys) -> dict:
    assert main(["report", str(run), "--no-baseline", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def table_rows(html: str) -> list[list[str]]:
    section = html[html.index('id="failure-groups-table"') :]
    section = section[: section.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)[1:]  # skip the header
    return [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows
    ]


def test_failures_grouped_by_rules(make_run, capsys):
    run = make_run(edit=two_missing_kernels)
    out = report(run, capsys)
    assert out["failure_groups"] == str(run / "failure_groups.json")
    data = json.loads((run / "failure_groups.json").read_text())
    # failing rows: rep/vit + rep/t5 (forward), rep/gpt2 + full/d (on_device), full/g (load timeout), unit/op3
    assert data["failures"] == 6 and data["llm"] is False
    groups = {tuple(g["members"]): g for g in data["groups"]}
    assert [g["count"] for g in data["groups"]] == [2, 1, 1, 1, 1]
    assert groups[("rep/t5", "rep/vit")]["root_cause"] == "unsupported_op"
    assert groups[("full/g",)]["root_cause"] == "timeout"
    assert groups[("unit/op3",)]["root_cause"] == "numerics"
    assert {g["source"] for g in data["groups"]} == {"rules"}
    html = (run / "report.html").read_text()
    assert "Failures by probable root cause" in html
    rows = table_rows(html)
    assert len(rows) == 5
    assert rows[0][:3] == ["unsupported_op", "2", "rep/t5, rep/vit"]
    assert ["timeout", "1", "full/g"] in [r[:3] for r in rows]
    assert sum(int(r[1]) for r in rows) == 6


def test_run_without_failures_says_so(make_run, capsys):
    def all_pass(rows):
        for r in rows:
            if r["status"] not in ("pass", "skipped"):
                r.update(status="pass", reason="", error_class="", message="")

    run = make_run(edit=all_pass)
    report(run, capsys)
    assert json.loads((run / "failure_groups.json").read_text())["groups"] == []
    html = (run / "report.html").read_text()
    section = html[html.index('id="failure-groups"') : html.index('id="baseline"')]
    assert "0 failing" in section and "No failures." in section


def test_llm_merges_groups_when_configured(make_run, capsys, monkeypatch):
    run = make_run(edit=two_missing_kernels)
    # rule groups, in order: g1 forward no-kernel (2), g2 full/g timeout, g3 rep/gpt2, g4 full/d, g5 unit/op3
    merge = {
        "content": json.dumps(
            {
                "groups": [
                    {
                        "group_ids": ["g1", "g3", "g4"],
                        "root_cause": "unsupported_op",
                        "summary": "ops the backend lacks",
                    }
                ]
            }
        )
    }
    with FakeOpenAI([merge]) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("HARNESS_LLM_MODEL", "fake-model")
        monkeypatch.setenv("HARNESS_LLM_MAX_RETRIES", "0")
        report(run, capsys)
        assert len(srv.chat_requests()) == 1
    data = json.loads((run / "failure_groups.json").read_text())
    assert data["llm"] is True
    merged = data["groups"][0]
    assert (merged["source"], merged["count"]) == ("llm", 4)
    assert merged["members"] == ["full/d", "rep/gpt2", "rep/t5", "rep/vit"]
    rows = table_rows((run / "report.html").read_text())
    assert [r[1] for r in rows] == ["4", "1", "1"] and rows[0][-1] == "llm"
    assert (run / "llm_decisions.parquet").exists()
