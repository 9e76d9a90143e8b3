"""--early-stop and a suite's pooled entry (issue 49, defect 1): a task that never settles is scored in full, and the
pooled entry's last look sees it on all of its documents, so --early-stop blocks what the run without it blocks."""

from __future__ import annotations

import pytest

from tests.fixtures.listed_quiz import TASKS, candidate, gate, recorded_quiz


@pytest.fixture
def quiz(pytester, monkeypatch):
    return recorded_quiz(pytester, monkeypatch)


def test_the_last_pooled_look_sees_a_task_scored_in_full_on_all_of_its_documents(quiz):
    """Tasks a to c lose 8 right answers each and stop early (cannot regress); d loses 16, never settles and is scored
    in full. Without --early-stop the pooled entry (delta -0.0125) blocks the run. Stopped early, its last look must
    see d on all of its documents, not on those of d's look before its last block (700 of 800, 100 "unscored"): a
    pooled entry with documents unscored is never regressed."""
    candidate(quiz.path, {"quiz_a": 8, "quiz_b": 8, "quiz_c": 8, "quiz_d": 16})
    full, full_document = gate(quiz, "candidate")
    early, document = gate(quiz, "candidate", "--early-stop")

    notes = {key: outcome["note"] for key, outcome in document["gate"].items()}
    assert all("stopped early (cannot regress)" in notes[f"quiz/{name}"] for name in TASKS[:3])
    assert "stopped early" not in notes["quiz/quiz_d"]
    [full_pooled], [pooled] = full_document["pooled"], document["pooled"]
    assert full_pooled["verdict"] == "regressed" and full.ret == pytest.ExitCode.TESTS_FAILED
    assert pooled == full_pooled  # every document scored at the last look: the full run's pooled entry
    assert early.ret == pytest.ExitCode.TESTS_FAILED
    early.stdout.fnmatch_lines(["*the gate fails: 1 pooled entry regressed (quiz acc)*"])
