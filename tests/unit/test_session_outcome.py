"""Every report heads with the session's outcome, the one its exit status gives (gate/decision.py, SessionOutcome):
a session that fails with no regressed task says "failed" in the terminal summary, --md-report, --html-report and
--results-json (issue 36, item 5). --junitxml: tests/plugin/test_gate_readable.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from pytest_modelbench.gate.decision import EXIT_STATUS_INTERRUPTED, SessionDecision
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


def test_a_session_stopped_by_a_signal_is_interrupted_in_every_report_whatever_was_judged():
    """Issue 50: never "passed", never 1 or 7: the interrupted status, and the tasks it did not judge."""
    regressed = _passing_task("probe/second")
    regressed.verdict, regressed.failed = "regressed", True
    for results in ([_passing_task()], [_passing_task(), regressed]):
        decision = _decision(results=results, interrupted_by="SIGTERM", unfinished=["probe/third"], pytest_status=2)
        outcome = decision.outcome()
        assert outcome.exit_status == EXIT_STATUS_INTERRUPTED and outcome.as_json()["unfinished"] == ["probe/third"]
        assert outcome.reasons[0].startswith("SIGTERM stopped the session before 1 gated task(s) were judged: "
                                             "probe/third")
        assert not any("pytest: interrupted" in reason for reason in outcome.reasons)
        headlines = _headlines(decision)
        assert headlines.pop("terminal").startswith("gate interrupted: SIGTERM stopped the session")
        assert set(headlines.values()) == {"interrupted"}


def test_a_second_signal_exits_at_once_with_the_interrupted_status():
    code = textwrap.dedent("""
        import os, signal
        from pytest_modelbench.pytest_plugin.interruption import Interruption
        interruption = Interruption()
        interruption.install()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except KeyboardInterrupt as exc:
            print("first:", exc, flush=True)
            os.kill(os.getpid(), signal.SIGINT)
            print("not reached", flush=True)
    """)
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              cwd=Path(__file__).resolve().parents[2])
    assert finished.returncode == EXIT_STATUS_INTERRUPTED, finished.stderr
    assert finished.stdout == "first: SIGTERM\n"
