"""A group YAML as one gated item: its aggregate, with its subgroups and tasks as categories, on tiny models.

The project: group `probe_all` (acc, weight_by_size) over subgroup `probe_shaky` (tasks `shaky_a`, `shaky_b`, reached
through their tag) and subgroup `probe_steady` (task `steady_c`). The shaky tasks hold documents on which the bad model
answers differently from the good one (its accuracy there falls to 0); the steady task only documents where both
agree. Against the good model's baseline, the group must regress overall, in `probe_shaky` and its two tasks, and
nowhere in `probe_steady`.
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures.gate_tasks import write_task
from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    SUITE,
    _one_torch_thread,
    bad_model,
    baseline_file,
    gate_entries,
    probe_docs,
    run_gate,
)

GROUPS = {
    "probe_all.yaml": "group: probe_all\ntask:\n  - probe_shaky\n  - probe_steady\n"
                      "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\nmetadata:\n  version: 1\n",
    "probe_shaky.yaml": "group: probe_shaky\ngroup_alias: shaky\ntask:\n  - shaky_tasks\n"
                        "aggregate_metric_list:\n  - metric: acc\n",
    "probe_steady.yaml": "group: probe_steady\ntask:\n  - steady_c\naggregate_metric_list:\n  - metric: acc\n",
}


def make_group_project(pytester, docs: list[dict], metrics: tuple[str, ...] = ("acc",)):
    suite = pytester.path / "suites" / SUITE
    disagree = [d for d in docs if d["kind"] == "disagree"]
    agree = [d for d in docs if d["kind"] == "agree"]
    for task, task_docs in (("shaky_a", disagree[:12] + agree[:4]), ("shaky_b", disagree[12:] + agree[4:8]),
                            ("steady_c", agree[8:])):
        path = write_task(suite, task, task_docs, metrics)
        if task.startswith("shaky"):
            path.write_text(path.read_text() + "tag: shaky_tasks\n")
    for name, text in GROUPS.items():
        (suite / name).write_text(text)
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    return suite


def test_a_group_gates_its_aggregate_and_names_the_subgroup_that_regressed(pytester, tiny_model, bad_model,
                                                                            probe_docs):
    make_group_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=6)  # 3 groups, 3 tasks
    stored = json.loads(baseline_file(pytester, "probe_all").read_text())
    assert stored["category_members"] == {"probe_shaky": ["shaky_a", "shaky_b"], "probe_steady": ["steady_c"]}
    assert stored["scores"]["overall"]["acc"] == {"value": 1.0, "stderr": 0.0, "n": 40}

    junit = pytester.path / "junit.xml"
    result = run_gate(pytester, bad_model, f"--junitxml={junit}", "-k", "probe_all")
    result.assert_outcomes(failed=1)
    entries = gate_entries(junit)["probe_all"]
    assert {key for key, verdict in entries.items() if verdict == "regressed"} == {
        ("acc", None), ("acc", "probe_shaky"), ("acc", "shaky_a"), ("acc", "shaky_b"),
    }
    assert entries[("acc", "probe_steady")] == "pass" and entries[("acc", "steady_c")] == "pass"
    result.stdout.fnmatch_lines([
        "*task 'probe_all' regressed against baseline 'default' (baselines/default/probe/probe_all.json)*",
        "acc*probe_shaky*28*1.0000*0.2857*-0.7143*regressed",
    ])


COUNTING_CONFTEST = """
import pytest_modelbench.run.runner as runner

scored = []
_evaluate_task = runner.evaluate_task


def _counting(prepared, backend):
    scored.append(prepared.config.task)
    return _evaluate_task(prepared, backend)


def pytest_configure(config):
    runner.evaluate_task = _counting


def pytest_unconfigure(config):
    runner.evaluate_task = _evaluate_task
    print("SCORED " + ",".join(sorted(scored)))
"""


def test_each_subtask_is_scored_once_and_keeps_its_own_item(pytester, tiny_model, probe_docs):
    make_group_project(pytester, probe_docs)
    pytester.makeconftest(COUNTING_CONFTEST)
    results = pytester.path / "results.json"
    result = run_gate(pytester, tiny_model, "--score-only", f"--results-json={results}", "-v", "-s")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*probe_all.yaml::probe_all PASSED*", "*shaky_a.yaml::shaky_a PASSED*",
                                 "SCORED shaky_a,shaky_b,steady_c"])
    only_one = run_gate(pytester, tiny_model, "--score-only", "-v", "-s", "-k", "shaky_b")
    only_one.assert_outcomes(passed=1)
    only_one.stdout.fnmatch_lines(["*shaky_b.yaml::shaky_b PASSED*", "SCORED shaky_b"])
    document = json.loads(results.read_text())
    tasks = document["results"]
    # lm-eval's group score: the size-weighted mean over the leaf tasks, here all at 1.0 (labels are the model's own)
    assert tasks["probe/probe_all"]["acc"] == pytest.approx(1.0) and tasks["probe/probe_all"]["n"] == 40
    assert document["categories"]["probe/probe_all"]["probe_shaky"]["n"] == 28


@pytest.mark.parametrize("text, message", [
    ("group: g\ntask:\n  - no_such_task\naggregate_metric_list:\n  - metric: acc\n",
     "*g.yaml: group 'g' lists 'no_such_task', which is no task, tag or group of the YAML files under*"),
    ("group: g\ntask:\n  - steady_c\naggregate_metric_list:\n  - metric: f1\n",
     "*g.yaml: group 'g': none of its tasks scores f1*"),
    ("group: g\ntask:\n  - task: own_task\n    dataset_path: json\naggregate_metric_list:\n  - metric: acc\n",
     "*g.yaml: key 'task': an inline definition of 'own_task' (a task or group with no file of its own) is not*"),
    ("group: g\ntask:\n  - g\naggregate_metric_list:\n  - metric: acc\n", "*g.yaml: group cycle: g -> g*"),
])
def test_a_broken_group_is_one_collection_error_naming_the_file(pytester, probe_docs, text, message):
    suite = make_group_project(pytester, probe_docs)
    (suite / "g.yaml").write_text(text)
    result = pytester.runpytest("--collect-only", "-p", "no:cacheprovider", str(suite / "g.yaml"))
    result.stdout.fnmatch_lines([message])
    assert "Traceback" not in result.stdout.str()


BUNDLE = "group: probe_bundle\ntask:\n  - task: steady_c\n    num_fewshot: 2\n  - probe_shaky\n"


def test_a_bundle_gates_each_member_with_its_overrides(pytester, tiny_model, probe_docs):
    """A group without aggregate_metric_list (lm-eval's openllm) has no score: each member is an item of its own,
    scored with the entry's overrides; a member without overrides reuses its tasks' evaluations."""
    suite = make_group_project(pytester, probe_docs)
    (suite / "probe_bundle.yaml").write_text(BUNDLE)
    pytester.makeconftest(COUNTING_CONFTEST)
    results = pytester.path / "results.json"
    result = run_gate(pytester, tiny_model, "--score-only", f"--results-json={results}", "-v", "-s",
                      str(suite / "probe_bundle.yaml"), str(suite / "steady_c.yaml"))
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*probe_bundle.yaml::probe_bundle::steady_c PASSED*",
                                 "*probe_bundle.yaml::probe_bundle::probe_shaky PASSED*",
                                 "SCORED shaky_a,shaky_b,steady_c,steady_c"])  # steady_c twice: 2-shot and 0-shot
    shots = json.loads(results.read_text())["n-shot"]
    assert shots["probe/probe_bundle::steady_c"] == 2 and shots["probe/steady_c"] == 0


def test_a_group_metric_that_is_a_tasks_own_aggregate_is_gated_by_resampling(pytester, tiny_model, bad_model,
                                                                              probe_docs):
    """f1 is not a mean over documents: the group's f1 is lm-eval's mean of its tasks' f1 scores, re-computed on
    resampled documents for the test, overall and per subgroup."""
    suite = make_group_project(pytester, probe_docs, metrics=("acc", "f1"))
    (suite / "probe_all.yaml").write_text(GROUPS["probe_all.yaml"].replace(
        "weight_by_size: true\n", "weight_by_size: true\n  - metric: f1\n"))
    run_gate(pytester, tiny_model, "--snapshot-update", "-k", "probe_all").assert_outcomes(passed=1)
    stored = json.loads(baseline_file(pytester, "probe_all").read_text())
    assert stored["metrics"]["f1"]["aggregate"] is True and stored["scores"]["overall"]["f1"]["value"] == 1.0
    run_gate(pytester, tiny_model, "-k", "probe_all").assert_outcomes(passed=1)

    junit = pytester.path / "junit.xml"
    run_gate(pytester, bad_model, f"--junitxml={junit}", "-k", "probe_all").assert_outcomes(failed=1)
    entries = gate_entries(junit)["probe_all"]
    assert entries[("f1", None)] == "regressed" and entries[("f1", "probe_shaky")] == "regressed"
    assert entries[("f1", "probe_steady")] == "pass"


def test_list_tasks_shows_a_group_with_its_tasks_and_subgroups(pytester, probe_docs):
    make_group_project(pytester, probe_docs)
    result = pytester.runpytest("--list-tasks", "-p", "no:cacheprovider", "--model=unused", "-k", "probe_all")
    result.stdout.fnmatch_lines(["probe/probe_all*-*group: 3 task(s), 2 subgroup(s)*-*acc*as its tasks*no"])


def test_a_bundles_member_baselines_are_not_unused(pytester, tiny_model, probe_docs):
    suite = make_group_project(pytester, probe_docs)
    (suite / "probe_bundle.yaml").write_text(BUNDLE)
    run_gate(pytester, tiny_model, "--snapshot-update", "-k", "probe_bundle").assert_outcomes(passed=2)
    assert baseline_file(pytester, "probe_bundle__steady_c").is_file()
    again = run_gate(pytester, tiny_model, "--snapshot-update", "-k", "probe_bundle")
    again.assert_outcomes(passed=2)
    assert "unused baseline" not in again.stdout.str() and baseline_file(pytester, "probe_bundle__probe_shaky").is_file()
