"""--early-stop through pytest (issue 22, item 5): a task scored in blocks stops once its verdict is settled, scoring
fewer documents, with the full run's verdict; a candidate near its margin is scored in full."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.skilled_quiz import lost_share, write_quiz

TASK = "quiz_a"
DOCUMENTS = 2400  # 8 blocks of 300


@pytest.fixture
def quiz(pytester, monkeypatch):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    monkeypatch.setenv("SKILLED_SCORED", str(pytester.path / "scored.txt"))
    write_quiz(pytester.path, [TASK], DOCUMENTS)
    return pytester


def gate(pytester, model, *args):
    """The run, its results JSON's outcome for the task, and the documents it scored (two requests each)."""
    scored = pytester.path / "scored.txt"
    scored.unlink(missing_ok=True)
    results = pytester.path / "results.json"
    run = pytester.runpytest("-p", "no:cacheprovider", "--backend=skilled:make", f"--model={model}", "--no-cache",
                             f"--results-json={results}", "suites/quiz", *args)
    outcome = json.loads(results.read_text())["gate"][f"quiz/{TASK}"] if results.exists() else None
    requests = sum(int(line) for line in scored.read_text().split()) if scored.exists() else 0
    return run, outcome, requests // 2


@pytest.mark.parametrize("candidate, verdict, stops_after", [
    ("skill-300", "regressed", 300),  # 30 points worse: the first look blocks it
    ("skill-600", "pass", 300),  # the baseline's own answers: nothing can regress
])
def test_a_settled_task_stops_early_with_the_full_runs_verdict(quiz, candidate, verdict, stops_after):
    assert lost_share(TASK, DOCUMENTS, better=600, worse=300) > 0.25  # a clear regression, by construction
    gate(quiz, "skill-600", "--snapshot-update")[0].assert_outcomes(passed=1)

    full, full_outcome, full_scored = gate(quiz, candidate)
    early, outcome, scored = gate(quiz, candidate, "--early-stop")

    assert full_scored == DOCUMENTS and scored == stops_after
    assert outcome["status"] == full_outcome["status"] == verdict
    assert early.ret == full.ret
    assert outcome["n_documents"] == stops_after
    how = "regressed" if verdict == "regressed" else "cannot regress"
    assert outcome["note"] == f"stopped early ({how}) after {stops_after} of {DOCUMENTS:,} documents"
    early.stdout.fnmatch_lines([f"*quiz/{TASK}*{verdict}*stopped early ({how}) after {stops_after} of*"])
    if verdict == "regressed":
        early.stdout.fnmatch_lines(["*acc*(all)*regressed*", "*stopped early (regressed)*--early-stop*"])


def test_a_candidate_at_its_margin_is_scored_in_full_and_judged_as_without(quiz):
    # one point worse, the margin itself: no look can settle it, and the last block is the whole task
    assert 0.005 < lost_share(TASK, DOCUMENTS, better=600, worse=590) < 0.015
    gate(quiz, "skill-600", "--snapshot-update")[0].assert_outcomes(passed=1)
    full, full_outcome, _ = gate(quiz, "skill-590")
    early, outcome, scored = gate(quiz, "skill-590", "--early-stop")
    assert scored == DOCUMENTS and outcome["n_documents"] == DOCUMENTS
    assert outcome["entries"] == full_outcome["entries"] and outcome["status"] == full_outcome["status"]
    assert "stopped early" not in outcome["note"]


@pytest.mark.parametrize("other", ["--snapshot-update", "--score-only"])
def test_early_stop_refuses_to_record_or_to_run_without_a_gate(quiz, other):
    run = quiz.runpytest("-p", "no:cacheprovider", "--backend=skilled:make", "--model=skill-600", "--early-stop",
                         other, "suites/quiz")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines([f"*--early-stop scores part of each task and cannot go with {other}*"])
