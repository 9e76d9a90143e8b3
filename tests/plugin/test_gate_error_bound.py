"""The false-block bound the reports print is the one that holds when a task's YAML sets its own alpha
(issue 18, item 5)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from pytest_modelbench.gate.result import STATUS_COMPARED, GateResult
from pytest_modelbench.outputs.gate_summary import error_rate_line
from pytest_modelbench.outputs.results import RESULTS_SCHEMA
from tests.fixtures.gate_tasks import pool_documents
from tests.plugin.gate_project import _one_torch_thread, make_project, run_gate  # noqa: F401 - fixtures

TASKS = tuple(f"gate_probe_{i}" for i in range(4))
# Bonferroni over the 4 gated tasks and the suite's pooled family (gate/pooled.py; it weighs half the suite's 4, and is
# tested at the suite's smallest alpha): each task at its own alpha / 6, three at the default 0.05, one at 0.5.
POOLED_LEVEL = 0.05 * 2 / 6
TRUE_BOUND = (0.05 + 0.05 + 0.05 + 0.5) / 6 + POOLED_LEVEL  # 0.125


def test_a_tasks_own_alpha_is_in_the_printed_bound(pytester, tiny_model, monkeypatch):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    suite = make_project(pytester, pool_documents(12), tasks=TASKS)
    loose = suite / f"{TASKS[3]}.yaml"
    loose.write_text(loose.read_text(encoding="utf-8") + "  gate:\n    alpha: 0.5\n", encoding="utf-8")
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=4)

    md, html, results = (pytester.path / name for name in ("gate.md", "gate.html", "results.json"))
    result = run_gate(pytester, tiny_model, f"--md-report={md}", f"--html-report={html}", f"--results-json={results}")
    result.assert_outcomes(passed=4)
    line = (f"false blocks: at most {TRUE_BOUND:g} for the 4 gated task(s) together when nothing regressed past "
            "its margin")
    result.stdout.fnmatch_lines([f"*{line} (0.00833 per task, 0.0833 for probe/{TASKS[3]}; pooled: probe 0.0167)*"])
    assert "at most 0.05 " not in result.stdout.str()
    assert line in md.read_text(encoding="utf-8") and line in html.read_text(encoding="utf-8")

    document = json.loads(results.read_text(encoding="utf-8"))
    jsonschema.validate(document, json.loads(RESULTS_SCHEMA.read_text()))
    gate = {key.removeprefix("probe/"): outcome for key, outcome in document["gate"].items()}
    assert {task: (gate[task]["alpha"], gate[task]["gated_tasks"]) for task in TASKS} == {
        TASKS[0]: (0.05, 4), TASKS[1]: (0.05, 4), TASKS[2]: (0.05, 4), TASKS[3]: (0.5, 4)}
    assert [entry["level"] for entry in document["pooled"]] == [pytest.approx(POOLED_LEVEL)]
    assert sum(gate[task]["level"] for task in TASKS) + POOLED_LEVEL == pytest.approx(TRUE_BOUND)


def compared(task: str, alpha: float, tasks: int) -> GateResult:
    return GateResult(task, STATUS_COMPARED, baseline=f"{task}.json", baseline_name="default", verdict="pass",
                      alpha=alpha, tasks=tasks)


def test_per_task_control_and_tasks_not_compared():
    per_task = [compared("a", 0.05, 1), compared("b", 0.05, 1), compared("c", 0.05, 1), compared("d", 0.5, 1)]
    assert error_rate_line(per_task) == (
        "false blocks: at most 0.05 per task, 0.5 for d when nothing regressed past its margin "
        "(--gate-error-control=task); up to 0.65 for the 4 compared task(s) together"
    )
    missing = GateResult("d", "missing", baseline="d.json", baseline_name="default")
    session = [compared("a", 0.05, 4), compared("b", 0.05, 4), compared("c", 0.05, 4), missing]
    assert error_rate_line(session).startswith(
        "false blocks: at most 0.0375 for the 3 compared of 4 gated tasks together when nothing regressed past its "
        "margin (0.0125 per task)"
    )
