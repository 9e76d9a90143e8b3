"""--early-stop and integrity (issue 49, defect 2): the documents a stopped task fails to score while it scores on for
its suite's pooled looks count as they do without --early-stop, so --early-stop blocks what the run without it blocks,
with the same exit status."""

from __future__ import annotations

import pytest

from pytest_modelbench.gate.decision import EXIT_STATUS_INTEGRITY
from tests.fixtures.listed_quiz import TASKS, block, candidate, gate, recorded_quiz


@pytest.fixture
def quiz(pytester, monkeypatch):
    return recorded_quiz(pytester, monkeypatch)


@pytest.mark.parametrize("lost, failing, exit_status", [
    # one document of a's last block (1 of 3,200, inside the 1% limit): the pooled entry of all four regressed
    (dict.fromkeys(TASKS, 8), lambda: block("quiz_a", 7)[1:2], pytest.ExitCode.TESTS_FAILED),
    # a's whole last block (12.5%): a is in error, and the pooled entry of the other three regressed
    (dict.fromkeys(TASKS, 8), lambda: block("quiz_a", 7), pytest.ExitCode.TESTS_FAILED),
    # a's whole last block, the other three's pooled entry at its margin: only the run failed
    ({"quiz_a": 8, "quiz_b": 4, "quiz_c": 4, "quiz_d": 4}, lambda: block("quiz_a", 7), EXIT_STATUS_INTEGRITY),
], ids=["one-document", "a-block-and-a-pooled-regression", "a-block-alone"])
def test_documents_a_stopped_task_fails_to_score_for_the_pooled_looks_count_as_without_early_stop(
        quiz, lost, failing, exit_status):
    """Task a stops early (cannot regress) after 500 of its 800 documents; the pooled looks score on to its last block,
    where the backend fails on documents (`Unscored`). As without --early-stop, those documents are left out of both
    sides of the pooled entry (not counted as not yet scored, which would keep it from ever regressing), and a's
    integrity is that of everything it scored: over its limits, a is in error."""
    failing = failing()
    candidate(quiz.path, lost, failing)
    full, full_document = gate(quiz, "candidate")
    early, document = gate(quiz, "candidate", "--early-stop")

    assert full.ret == exit_status and early.ret == exit_status
    assert document["pooled"] == full_document["pooled"]
    full_outcome, outcome = full_document["gate"]["quiz/quiz_a"], document["gate"]["quiz/quiz_a"]
    assert outcome["integrity"]["unscored"] == full_outcome["integrity"]["unscored"] == len(failing)
    if full_outcome["status"] == "error":
        assert outcome["status"] == "error" and outcome["note"] == full_outcome["note"]
    else:
        assert outcome["note"] == "stopped early (cannot regress) after 500 of 800 documents"
    for run in (full, early):
        run.stdout.fnmatch_lines([f"*quiz/quiz_a: retried 0 requests, {len(failing)} of 800 documents unscored*"])
