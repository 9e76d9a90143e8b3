"""Parallel workers (pytest-xdist -n 2) record and check baselines, and share one score cache, without corrupting
them."""

from __future__ import annotations

import json
import re

import pytest

from pytest_modelbench.gate.baseline_file import parse
from pytest_modelbench.scoring.causal import CausalLMScorer
from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    _one_torch_thread,
    bad_model,
    baseline_file,
    gate_heads,
    make_project,
    probe_docs,
    run_gate,
)

pytest.importorskip("xdist")
TASKS = tuple(f"gate_probe_{i}" for i in range(4))


def test_two_workers_write_baselines_without_corrupting_them(pytester, tiny_model, probe_docs, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the workers are fresh processes
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    make_project(pytester, probe_docs, tasks=TASKS)
    folder = baseline_file(pytester, TASKS[0]).parent
    folder.mkdir(parents=True)
    (folder / "retired.json").write_text("{}")  # the baseline of a task that no longer exists
    (folder / f"{TASKS[1]}.json").write_text('{"format": "pytest-modelbench-baseline/1"')  # a corrupt one
    md = pytester.path / "gate.md"

    result = run_gate(pytester, tiny_model, "-n", "2", "--snapshot-update",
                                f"--md-report={md}")
    result.assert_outcomes(passed=4)
    # results and unused baselines travel from the workers to the controller's summary and markdown report
    result.stdout.fnmatch_lines([
        "*3 snapshots generated. 1 snapshot updated.*",
        "*4 task(s): 3 created, 1 updated*",
        "*1 unused baseline deleted.*",
        "Deleted retired (baselines/default/probe/retired.json)",
    ])
    assert "| probe/gate_probe_1 | updated | re-recorded (corrupt baseline, not valid JSON" in md.read_text()
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{t}.json" for t in TASKS)  # no temporary files
    for task in TASKS:
        record = parse(baseline_file(pytester, task).read_text(), baseline_file(pytester, task))
        assert record.task == task and len(record.doc_keys) == len(probe_docs)

    assert "score cache" not in result.stdout.str()  # no cache warning: neither worker gave up on a lock or a write

    monkeypatch.setattr(CausalLMScorer, "score_encoded", refuse_to_score)  # the workers cached every score
    result = run_gate(pytester, tiny_model)
    result.assert_outcomes(passed=4)
    assert result.ret == 0

    junit = pytester.path / "junit.xml"
    html = pytester.path / "gate.html"
    result = run_gate(pytester, tiny_model, "-n", "2", f"--junitxml={junit}", f"--html-report={html}")
    result.assert_outcomes(passed=4)
    assert result.ret == 0
    page = html.read_text()  # the workers' records reach the controller's HTML page: a section and a chart per task
    assert page.count('<section class="task"') == 4 and page.count('<svg class="delta-chart"') == 4
    # every worker splits alpha over the same 4 collected tasks, so each item is gated on its own
    assert gate_heads(junit) == {task: 4 for task in TASKS}
    result.stdout.fnmatch_lines(["*false blocks: at most 0.05 for the 4 gated task(s) together*"])
    result = run_gate(pytester, tiny_model, "-k", "gate_probe_0 or gate_probe_1", "--gate-error-control=task",
                      f"--junitxml={junit}")
    result.assert_outcomes(passed=2, deselected=2)
    assert gate_heads(junit) == {TASKS[0]: 1, TASKS[1]: 1}
    result.stdout.fnmatch_lines(["*false blocks: at most 0.05 per task*(--gate-error-control=task)*"])


def test_two_workers_give_the_results_json_and_scores_table_of_one_process(pytester, tiny_model, probe_docs,
                                                                            monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the workers score with one thread, as this process does
    make_project(pytester, probe_docs, tasks=TASKS, metrics=("acc", "acc_norm"))
    common = ("--no-cache", "--log-samples")  # every number is computed again, by whichever process runs the task
    run_gate(pytester, tiny_model, "--snapshot-update", *common).assert_outcomes(passed=4)
    one, two = pytester.path / "one.json", pytester.path / "two.json"
    single = run_gate(pytester, tiny_model, *common, f"--results-json={one}")
    single.assert_outcomes(passed=4)
    workers = run_gate(pytester, tiny_model, "-n", "2", *common, f"--results-json={two}")
    workers.assert_outcomes(passed=4)

    document = json.loads(two.read_text())
    for part in ("tasks", "results", "categories", "n-shot", "versions", "samples", "gate"):
        assert sorted(document[part]) == [f"probe/{task}" for task in TASKS], part
    # the results JSON holds no timing field (the baselines' dates are those of the same files in both runs)
    assert two.read_text() == one.read_text()
    table = scores_table(workers)
    assert len(table) == 2 + 4 * 6  # header, rule, per task 2 metrics overall and in each category (agree, disagree)
    assert [line.split()[0] for line in table[2:]] == [f"probe/{task}" for task in TASKS for _ in range(6)]
    assert table == scores_table(single)


def scores_table(result) -> list[str]:
    """The lines of the terminal's "modelbench scores" section."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if " modelbench scores " in line) + 1
    end = next(i for i in range(start, len(lines)) if re.fullmatch(r"[=-]+ \S.* [=-]+", lines[i]))  # next section
    return [line for line in lines[start:end] if line]


def refuse_to_score(*args, **kwargs):
    raise AssertionError("the model was run although every score was cached")
