"""Per-task weights in the session's split of alpha: the task a release hinges on gets a larger share (issue "Gate
power where releases really regress", item 3)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from pytest_modelbench.outputs.results import RESULTS_SCHEMA
from tests.fixtures.gate_tasks import pool_documents
from tests.plugin.gate_project import _one_torch_thread, gate_heads, make_project, run_gate  # noqa: F401 - fixtures

TASKS = tuple(f"gate_probe_{i}" for i in range(4))
HEAVY = f"probe/{TASKS[0]}"


def weighted_project(pytester, ini_weights: str) -> None:
    suite = make_project(pytester, pool_documents(12), tasks=TASKS)
    heavy = suite / f"{TASKS[0]}.yaml"
    heavy.write_text(heavy.read_text(encoding="utf-8") + "  gate:\n    weight: 2\n", encoding="utf-8")
    pytester.makeini(f"[pytest]\nmodelbench_suites = suites\nmodelbench_gate_weights =\n{ini_weights}")


def test_weights_3_1_1_1_and_the_suites_pooled_family_split_alpha(pytester, tiny_model, monkeypatch):
    """Four accuracy tasks of one suite weighing 3, 1, 1, 1, and the suite's pooled entries (gate/pooled.py), whose
    family weighs half the suite's: alpha splits 3/9, 1/9 three times, and 3/9."""
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    weighted_project(pytester, f"    {HEAVY} = 3\n")  # over the YAML's 2
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=4)

    junit, results, md = (pytester.path / name for name in ("junit.xml", "results.json", "gate.md"))
    result = run_gate(pytester, tiny_model, f"--junitxml={junit}", f"--results-json={results}", f"--md-report={md}")
    result.assert_outcomes(passed=4)
    assert gate_heads(junit, "weight") == {TASKS[0]: 3, TASKS[1]: 1, TASKS[2]: 1, TASKS[3]: 1}
    assert set(gate_heads(junit, "total_weight").values()) == {9}

    document = json.loads(results.read_text(encoding="utf-8"))
    jsonschema.validate(document, json.loads(RESULTS_SCHEMA.read_text()))
    levels = {key: outcome["level"] for key, outcome in document["gate"].items()}
    assert levels == {HEAVY: pytest.approx(0.05 * 3 / 9), **{f"probe/{t}": pytest.approx(0.05 / 9) for t in TASKS[1:]}}
    assert [entry["level"] for entry in document["pooled"]] == [pytest.approx(0.05 * 3 / 9)] * len(document["pooled"])
    assert sum(levels.values()) + 0.05 * 3 / 9 == pytest.approx(0.05)  # still the session's alpha

    result.stdout.fnmatch_lines([
        "*false blocks: at most 0.05 for the 4 gated task(s) together when nothing regressed past its margin "
        f"(0.00556 per task, 0.0167 for {HEAVY}; weighted: {HEAVY} 3, others 1; pooled: probe 0.0167)*",
        "task*gate*detail*alpha share*caught at 80%",
    ])
    rows = {line.split()[0]: line for line in result.stdout.lines if line.startswith("probe/")}
    assert "0.0167 (33.3%)" in rows[HEAVY]
    assert all("0.00556 (11.1%)" in rows[f"probe/{t}"] for t in TASKS[1:])
    report = md.read_text(encoding="utf-8")
    assert f"| {HEAVY} | pass | 2 entries within the margin | 0.0167 (33.3%) |" in report


def test_an_ini_weight_naming_no_collected_task_is_a_usage_error(pytester):
    weighted_project(pytester, "    probe/gate_probe_9 = 3\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*modelbench_gate_weights names no collected task or pooled suite: probe/gate_probe_9 *"])
    # a task deselected by -k is still collected: its weight counts for no one, and is no error
    weighted_project(pytester, f"    {HEAVY} = 3\n")
    assert pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-k", TASKS[1]).ret == pytest.ExitCode.OK


def test_an_ini_weight_whose_suite_is_a_typo_is_a_usage_error(pytester):
    """A suite part naming no suite of the project (here 'porbe') was kept silently, as for a suite not collected."""
    weighted_project(pytester, "    porbe/gate_probe_0 = 3\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*modelbench_gate_weights names a suite that is in no modelbench_suites folder: "
                                 "porbe/gate_probe_0 (suites: probe)*"])
    (pytester.path / "suites" / "other").mkdir()  # a suite of the project not collected this run keeps its weights
    (pytester.path / "suites" / "other" / "t.yaml").write_text("task: t\n")
    weighted_project(pytester, "    other/t = 3\n")
    assert pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "suites/probe").ret == pytest.ExitCode.OK


def test_a_bad_ini_weight_is_a_usage_error_naming_it(pytester):
    weighted_project(pytester, f"    {HEAVY} = heavy\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*modelbench_gate_weights: the weight of {HEAVY} must be a number, got 'heavy'*"])
