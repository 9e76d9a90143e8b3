"""The gate's output read without the manual: the column guide, task items vs custom tests, a settings change
(--limit) against the stored baselines, and the HTML report's scores, legend and provenance highlights."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    _one_torch_thread,
    bad_model,
    make_project,
    probe_docs,
    run_gate,
)

CUSTOM_TEST = "def test_custom():\n    assert True\n"


def _provenance_row(html: str, key: str) -> str:
    return re.search(rf"<tr[^>]*><td>{key}</td>.*?</tr>", html).group(0)


def _recorded_project(pytester, tiny_model, probe_docs) -> None:
    make_project(pytester, probe_docs)
    pytester.makepyfile(test_custom=CUSTOM_TEST)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=2)


def test_the_summary_counts_task_items_and_custom_tests_and_says_what_its_columns_mean(pytester, tiny_model,
                                                                                       probe_docs):
    _recorded_project(pytester, tiny_model, probe_docs)
    result = run_gate(pytester, tiny_model)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "1 task(s): 1 pass; 1 custom test(s) besides, not gated (pytest's totals count both)",
        "task*gate*detail*caught at 80%",
        "probe/gate_probe*pass*",
        "how to read it: gate = the task's verdict against its baseline*detail = what moved, counted in entries (one "
        "per metric overall and per category*caught at 80% = the smallest drop of each overall score*false blocks = *",
    ])


def test_a_limit_change_fails_closed_with_its_scores_and_how_to_compare(pytester, tiny_model, probe_docs, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # pytest trims the short summary line to the terminal's width
    _recorded_project(pytester, tiny_model, probe_docs)
    result = run_gate(pytester, tiny_model, "--limit=10")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        "re-baseline required: limit changed (None → 10). Not compared with baseline 'default' "
        "(baselines/default/probe/gate_probe.json): it was recorded under other settings*(the gate fails closed).",
        "This run's scores (not gated):",
        "metric*category*n*this run*baseline (other settings)",
        "acc*(all)*10*1.0000*1.0000 (n=40)",  # the good model is right on every probe document
        "To compare at these settings, record a baseline of their own*`pytest --snapshot-update "
        "--baseline-name=<new name>`*then gate with --baseline-name=<new name>*run with --snapshot-update.",
        "probe/gate_probe*rebaseline-required*re-baseline required: limit changed (None → 10); this run: acc 1.0000 (n=10)*",
        "1 task(s) not compared: their settings differ from the baseline's. To compare at these settings*",
        "FAILED *gate_probe - re-baseline required: limit changed (None → 10)*",
    ])


def test_html_report_has_scores_whatever_the_verdict_a_legend_only_with_charts_and_marks_provenance_changes(
        pytester, tiny_model, bad_model, probe_docs):
    _recorded_project(pytester, tiny_model, probe_docs)
    page = pytester.path / "gate.html"
    run_gate(pytester, tiny_model, "--limit=10", f"--html-report={page}").assert_outcomes(failed=1, passed=1)
    html = page.read_text(encoding="utf-8")
    assert "Scores of this run (not compared)" in html
    assert "To compare at these settings, record a baseline of their own" in html
    assert '<td class="num">10</td><td class="num">1.0000</td><td class="num">1.0000 (n=40)</td>' in html
    assert 'class="legend"' not in html and "Charts:" not in html  # no charts, no chart legend
    assert _provenance_row(html, "limit") == '<tr class="differs must-match"><td>limit</td><td>-</td><td>10</td></tr>'
    assert _provenance_row(html, "model").startswith("<tr><td>model</td>")  # the same model: not highlighted
    assert "Highlighted: differs between the baseline and this run" in html

    # a compared run has charts, so the page explains them; the other model's rows are highlighted
    run_gate(pytester, bad_model, f"--html-report={page}").assert_outcomes(failed=1, passed=1)
    html = page.read_text(encoding="utf-8")
    assert '<svg class="delta-chart"' in html and '<p class="legend">Charts: each row' in html
    assert _provenance_row(html, "model").startswith('<tr class="differs"><td>model</td>')
    assert _provenance_row(html, "limit") == "<tr><td>limit</td><td>-</td><td>-</td></tr>"


def test_a_session_failed_by_a_custom_test_and_an_unused_baseline_says_failed_in_every_report(pytester, tiny_model,
                                                                                            probe_docs):
    _recorded_project(pytester, tiny_model, probe_docs)
    pytester.makepyfile(test_custom="def test_custom():\n    assert False\n")
    stored = pytester.path / "baselines" / "default" / "probe"
    (stored / "gone.json").write_bytes((stored / "gate_probe.json").read_bytes())  # its task no longer exists
    outputs = {name: pytester.path / name for name in ("gate.md", "gate.html", "results.json", "junit.xml")}
    result = run_gate(pytester, tiny_model, f"--md-report={outputs['gate.md']}",
                      f"--html-report={outputs['gate.html']}", f"--results-json={outputs['results.json']}",
                      f"--junitxml={outputs['junit.xml']}")
    result.assert_outcomes(passed=1, failed=1)  # the gated task passed
    assert result.ret == 1
    reasons = ["1 test(s) failed: test_custom.py::test_custom", "1 unused baseline(s)"]
    result.stdout.fnmatch_lines([f"gate failed: {'; '.join(reasons)}", "1 task(s): 1 pass; 1 custom test(s)*"])
    markdown = outputs["gate.md"].read_text()
    assert "gate **failed**" in markdown and all(f"- {reason}" in markdown for reason in reasons)
    page = outputs["gate.html"].read_text()
    assert 'gate <b class="failed">failed</b>' in page and "<title>pytest-modelbench gate: failed</title>" in page
    assert json.loads(outputs["results.json"].read_text())["outcome"] == {"status": "failed", "reasons": reasons,
                                                                       "exit_status": 1}
    suite = ET.parse(outputs["junit.xml"]).getroot().find("testsuite")
    [outcome] = [p.get("value") for p in suite.find("properties") if p.get("name") == "modelbench.gate.outcome"]
    assert json.loads(outcome) == {"status": "failed", "reasons": reasons, "exit_status": 1}
