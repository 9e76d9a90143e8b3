"""A task is its suite and its name: one task name in two suites is two tasks (two rows, two baselines); two task
files that would share one baseline file are refused at collection, naming both files."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.gate_tasks import pool_documents, task_yaml, write_task
from tests.plugin.gate_project import _one_torch_thread, run_gate  # noqa: F401 - fixture


def test_one_task_name_in_two_suites_gives_two_rows_and_two_baselines(pytester, tiny_model):
    docs = pool_documents(10)
    write_task(pytester.path / "suites" / "alpha", "shared", docs[:4])
    write_task(pytester.path / "suites" / "beta", "shared", docs[4:])
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    results, md = pytester.path / "results.json", pytester.path / "gate.md"

    result = run_gate(pytester, tiny_model, "--snapshot-update", f"--results-json={results}", f"--md-report={md}")
    result.assert_outcomes(passed=2)
    # the document counts tell the two tasks apart: 4 in alpha, 6 in beta
    result.stdout.fnmatch_lines(["*modelbench scores*", "alpha/shared  *acc*4", "beta/shared  *acc*6"])
    document = json.loads(results.read_text())
    assert {key: block["n"] for key, block in document["results"].items()} == {"alpha/shared": 4, "beta/shared": 6}
    assert document["tasks"] == {"alpha/shared": {"suite": "alpha", "task": "shared"},
                                 "beta/shared": {"suite": "beta", "task": "shared"}}
    assert {key: outcome["status"] for key, outcome in document["gate"].items()} == {
        "alpha/shared": "created", "beta/shared": "created"}
    assert "| alpha/shared | created |" in md.read_text() and "| beta/shared | created |" in md.read_text()
    for suite, n in (("alpha", 4), ("beta", 6)):
        stored = json.loads((pytester.path / "baselines" / "default" / suite / "shared.json").read_text())
        assert (stored["suite"], len(stored["documents"]["rows"])) == (suite, n)

    result = run_gate(pytester, tiny_model, f"--results-json={results}")
    result.assert_outcomes(passed=2)
    assert {key: outcome["status"] for key, outcome in json.loads(results.read_text())["gate"].items()} == {
        "alpha/shared": "pass", "beta/shared": "pass"}


@pytest.mark.parametrize("first, second, clash", [
    ("shared", "shared", "task 'shared' is also defined in {a}: both would be gated against one baseline file "
                         "(one/shared.json in suite 'one') and reported as one row"),
    ("shared task", "shared_task", "task 'shared_task' and task 'shared task' in {a} would be gated against one "
                                   "baseline file (one/shared_task.json in suite 'one'; file names keep letters, "
                                   "digits, '.', '_' and '-' only)"),
], ids=["same-name", "same-baseline-file-name"])
def test_two_task_files_sharing_one_baseline_are_a_collection_error_naming_both(pytester, first, second, clash):
    suite = pytester.path / "suites" / "one"
    write_task(suite, "data_source", pool_documents(4))
    (suite / "data_source.yaml").unlink()
    (suite / "a.yaml").write_text(task_yaml(first, "data/data_source.jsonl"))
    (suite / "b.yaml").write_text(task_yaml(second, "data/data_source.jsonl"))
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")

    result = pytester.runpytest("--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        f"{suite / 'b.yaml'}: {clash.format(a=suite / 'a.yaml')}; rename one (key 'task') or move it to another "
        "suite folder",
    ])


def test_folders_outside_the_suites_with_one_name_are_one_suite(pytester):
    """Folders named on the command line outside modelbench_suites are suites by their folder's name."""
    for parent in ("x", "y"):
        folder = pytester.path / parent / "probe"
        write_task(folder, "same", pool_documents(4))
    result = pytester.runpytest("x/probe", "y/probe", "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"{pytester.path / 'y/probe/same.yaml'}: task 'same' is also defined in "
                                 f"{pytester.path / 'x/probe/same.yaml'}: both would be gated against one baseline "
                                 "file (probe/same.json in suite 'probe')*"])


def test_custom_tests_cannot_swap_one_task_for_another(pytester, tiny_model):
    """modelbench_model.evaluate: a name two suites define is ambiguous; a second file of one suite and name would
    replace the first one's row."""
    docs = pool_documents(8)
    write_task(pytester.path / "suites" / "alpha", "shared", docs[:4])
    write_task(pytester.path / "suites" / "beta", "shared", docs[4:])
    write_task(pytester.path / "extra" / "alpha", "shared", docs[:2])  # outside the suites: suite 'alpha' too
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    pytester.makepyfile(test_custom="def test_by_name(modelbench_model):\n"
                                    "    modelbench_model.evaluate('shared')\n"
                                    "def test_by_paths(modelbench_model):\n"
                                    "    modelbench_model.evaluate('suites/alpha/shared.yaml')\n"
                                    "    modelbench_model.evaluate('extra/alpha/shared.yaml')\n")
    result = run_gate(pytester, tiny_model, "test_custom.py")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        f"*TaskConfigError: modelbench_model.evaluate: task name 'shared' is defined by 2 task files: alpha/shared "
        f"({pytester.path / 'suites/alpha/shared.yaml'}), beta/shared ({pytester.path / 'suites/beta/shared.yaml'}); "
        "pass the path of its task YAML",
        f"*DuplicateTaskError: {pytester.path / 'extra/alpha/shared.yaml'}: task 'shared' is also defined in "
        f"{pytester.path / 'suites/alpha/shared.yaml'}: both would be gated against one baseline file*",
    ])
