"""A suite's pooled entries through pytest (issue 22, item 2): three tasks each one point worse, every task inside its
one-point margin, the suite as a whole regressed; one process and two shards merged fail alike."""

from __future__ import annotations

import json

import pytest

from pytest_modelbench.__main__ import main
from tests.fixtures import skilled_quiz
from tests.fixtures.skilled_quiz import write_quiz

TASKS = ("quiz_a", "quiz_b", "quiz_c")
DOCUMENTS = 2000


@pytest.fixture
def quiz(pytester, monkeypatch):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    write_quiz(pytester.path, TASKS, DOCUMENTS)
    return pytester


def gate(pytester, model, *args):
    return pytester.runpytest("-p", "no:cacheprovider", "--backend=skilled:make", f"--model={model}",
                              "suites/quiz", *args)


def lost_share(name: str) -> float:
    """The share of the task's documents the 590 model gets wrong and the 600 one right: the true drop."""
    return skilled_quiz.lost_share(name, DOCUMENTS, better=600, worse=590)


def test_a_drop_inside_every_tasks_margin_fails_the_suites_pooled_entry(quiz):
    assert all(0.007 < lost_share(name) < 0.013 for name in TASKS)  # about one point per task, by construction
    gate(quiz, "skill-600", "--snapshot-update").assert_outcomes(passed=3)

    results = quiz.path / "results.json"
    report, page = quiz.path / "gate.md", quiz.path / "gate.html"
    run = gate(quiz, "skill-590", f"--results-json={results}", f"--md-report={report}", f"--html-report={page}")
    run.assert_outcomes(passed=3)  # no task regressed past its own one-point margin
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    run.stdout.fnmatch_lines(["*quiz*acc*3*6000*regressed*", "*the gate fails: 1 pooled entry regressed (quiz acc)*"])
    document = json.loads(results.read_text())
    [pooled] = document["pooled"]
    true_drop = sum(lost_share(name) for name in TASKS) / 3
    assert pooled["suite"] == "quiz" and pooled["tasks"] == [f"quiz/{name}" for name in TASKS]
    assert pooled["delta"] == pytest.approx(-true_drop) and pooled["margin"] == pytest.approx(0.005)
    assert pooled["level"] == pytest.approx(0.05 * 1.5 / 4.5)  # the family weighs half of its 3 tasks
    assert all(outcome["level"] == pytest.approx(0.05 / 4.5) for outcome in document["gate"].values())
    # the pooled family's level counts in the session's bound: 3 × 0.0111 + 0.0167
    run.stdout.fnmatch_lines(["*false blocks: at most 0.05 for the 3 gated task(s) together*0.0111 per task; "
                              "pooled: quiz 0.0167*"])
    assert "| quiz | acc | 3 | 6000 |" in report.read_text() and "gate **failed**" in report.read_text()
    html = page.read_text()
    assert "gate <b class=\"failed\">failed</b>" in html and "<th>suite (pooled)</th>" in html

    # -new-only rewrites nothing, so it cannot be what accepts the drop: it gates as the plain run (found by the modes
    # harness, tests/unit/test_gate_modes.py)
    assert gate(quiz, "skill-590", "--snapshot-update-new-only").ret == pytest.ExitCode.TESTS_FAILED
    updating = gate(quiz, "skill-590", "--snapshot-update")  # no task is out of its band: none is rewritten
    assert updating.ret == pytest.ExitCode.OK
    updating.stdout.fnmatch_lines(["*1 pooled entry regressed (quiz acc): not failing under --snapshot-update*"])

    unchanged = gate(quiz, "skill-600")
    assert unchanged.ret == pytest.ExitCode.OK
    unchanged.stdout.fnmatch_lines(["*quiz*acc*3*6000*pass*"])


def test_shards_leave_the_pooled_entry_to_the_merge_which_fails_alike(quiz, capsys):
    gate(quiz, "skill-600", "--snapshot-update").assert_outcomes(passed=3)
    records = [quiz.path / f"shard-{k}.json" for k in (1, 2)]
    for k, record in enumerate(records, start=1):
        shard = gate(quiz, "skill-590", f"--shard={k}/2", f"--run-record={record}")
        assert shard.ret == pytest.ExitCode.OK  # a shard holds only some of the suite's tasks
        shard.stdout.fnmatch_lines(["*pooled entries of quiz: judged when the shards' run records are merged*"])
    merged = quiz.path / "merged.json"
    assert main(["merge", *map(str, records), f"--results-json={merged}", "--", "suites/quiz"]) == 1  # the selection
    assert "the gate fails: 1 pooled entry regressed (quiz acc)" in capsys.readouterr().out
    [pooled] = json.loads(merged.read_text())["pooled"]
    assert pooled["verdict"] == "regressed" and pooled["n"] == 3 * DOCUMENTS
