"""Every report heads with the session's outcome, the one its exit status gives (gate/decision.py, SessionOutcome):
a session that fails with no regressed task says "failed" in the terminal summary, --md-report, --html-report and
--results-json (issue 36, item 5). --junitxml: tests/plugin/test_gate_readable.py."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from pytest_modelbench.gate.decision import SessionDecision
from pytest_modelbench.gate.result import STATUS_COMPARED, GateResult
from pytest_modelbench.outputs.results import RESULTS_SCHEMA, results_document
from pytest_modelbench.outputs.session_reports import terminal_section, write_reports

TASK_NODE = "suites/probe/gate_probe.yaml::gate_probe"


def _passing_task(task: str = "probe/gate_probe", nodeid: str = TASK_NODE) -> GateResult:
    return GateResult(task=task, status=STATUS_COMPARED, baseline=f"baselines/default/{task}.json",
                      baseline_name="default", verdict="pass", n_documents=40, nodeid=nodeid, alpha=0.05)


def _decision(**fields) -> SessionDecision:
    decision = SessionDecision("default", results=[_passing_task()])
    for name, value in fields.items():
        setattr(decision, name, value)
    return decision


# Sessions whose every gated task passed, and that exit 1 all the same; the words each reason must name.
FAILING = {
    "a custom test failed": (dict(failed_tests={"test_custom.py::test_x"}, pytest_status=1), "test_custom.py::test_x"),
    "an unused baseline": (dict(unused={"baselines/default/probe/gone.json"}), "unused baseline"),
    "a task erred before its gate": (
        dict(failed_tests={"suites/probe/other.yaml::other"}, pytest_status=1), "suites/probe/other.yaml::other"),
    "a pooled entry could not be settled": (
        dict(pooled_problems=["probe/gate_probe: could not score on for the pooled entries of probe: boom"]), "boom"),
    "a collection error": (dict(collection_errors=["suites/probe/broken.yaml"], pytest_status=2), "broken.yaml"),
    "an interrupted session": (dict(pytest_status=2), "interrupted"),
}


def _headlines(decision: SessionDecision) -> dict[str, str]:
    """Each report's headline: the words that say whether the gate passed."""
    written = {}
    write_reports(decision, md_report="gate.md", html_report="gate.html",  # type: ignore[arg-type]
                  write=lambda option, path, text: written.__setitem__(option, text))
    _, lines = terminal_section(decision)
    document = results_document([], {}, decision.outcomes_json(), decision.pooled_json(), decision.outcome_json())
    jsonschema.validate(document["outcome"], json.loads(RESULTS_SCHEMA.read_text())["properties"]["outcome"])
    return {
        "terminal": lines[0],
        "markdown": re.search(r"gate \*\*(\w+)\*\*", written["--md-report"]).group(1),
        "html": re.search(r'gate <b class="\w+">(\w+)</b>', written["--html-report"]).group(1),
        "html title": re.search(r"<title>pytest-modelbench gate: (\w+)</title>", written["--html-report"]).group(1),
        "json": document["outcome"]["status"],
    }


@pytest.mark.parametrize("case", FAILING)
def test_a_failing_session_with_no_regressed_task_heads_every_report_with_failed(case):
    fields, named = FAILING[case]
    decision = _decision(**fields)
    assert all(result.verdict == "pass" and not result.failed for result in decision.results)
    outcome = decision.outcome()
    assert outcome.failed and any(named in reason for reason in outcome.reasons)
    headlines = _headlines(decision)
    assert headlines["terminal"].startswith("gate failed: ") and named in headlines["terminal"]
    assert {key: value for key, value in headlines.items() if key != "terminal"} == {
        "markdown": "failed", "html": "failed", "html title": "failed", "json": "failed"}


def test_a_regressed_task_fails_and_a_clean_session_passes():
    regressed = _passing_task()
    regressed.verdict, regressed.failed = "regressed", True
    decision = _decision(results=[regressed], failed_tests={TASK_NODE}, pytest_status=1)
    # the failed task item is named once, by its task and verdict, not again as a failed test
    assert decision.outcome().reasons == ("1 task(s) failed: probe/gate_probe (regressed)",)
    clean = _headlines(_decision())
    assert clean == {"terminal": "gate passed", "markdown": "passed", "html": "passed", "html title": "passed",
                     "json": "passed"}


def test_unused_baselines_only_warned_about_or_deleted_do_not_fail():
    unused = {"baselines/default/probe/gone.json"}
    assert not _decision(unused=unused, warn_unused=True).outcome().failed
    assert not _decision(unused=unused, update=True).outcome().failed
