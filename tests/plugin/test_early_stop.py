"""--early-stop through pytest (issue 22, item 5): a task scored in blocks stops once its verdict is settled, scoring
fewer documents, with the full run's verdict; a candidate near its margin is scored in full."""

from __future__ import annotations

import json

import jsonschema
import pytest

from pytest_modelbench.outputs.results import RESULTS_SCHEMA
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
    # the baseline's own answers: after one block of 300 unchanged documents a drop the full run blocks (about 37
    # lost of 2,400) could still hide in the rest; after two it could not
    ("skill-600", "pass", 600),
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


def test_early_stop_verdicts_needs_early_stop(quiz):
    run = quiz.runpytest("-p", "no:cacheprovider", "--backend=skilled:make", "--model=skill-600",
                         "--early-stop-verdicts", "suites/quiz")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines(["*--early-stop-verdicts says how --early-stop stops a task: give --early-stop too*"])


POOLED_TASKS = ("quiz_a", "quiz_b", "quiz_c")


@pytest.fixture
def pooled_quiz(pytester, monkeypatch):
    """Three quiz tasks of one suite (one pooled entry, acc) with the skill-600 baseline recorded."""
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    monkeypatch.setenv("SKILLED_SCORED", str(pytester.path / "scored.txt"))
    write_quiz(pytester.path, POOLED_TASKS, DOCUMENTS)
    pytester.runpytest("-p", "no:cacheprovider", "--backend=skilled:make", "--model=skill-600", "--no-cache",
                       "suites/quiz", "--snapshot-update").assert_outcomes(passed=3)
    return pytester


def gate_pooled(pytester, candidate, *args):
    """The run of the three tasks, its results JSON, and the documents it scored (two requests each)."""
    (pytester.path / "scored.txt").unlink(missing_ok=True)
    results = pytester.path / "results.json"
    outcome = pytester.runpytest("-p", "no:cacheprovider", "--backend=skilled:make", f"--model={candidate}",
                                 "--no-cache", f"--results-json={results}", "suites/quiz", *args)
    requests = sum(int(line) for line in (pytester.path / "scored.txt").read_text().split())
    return outcome, json.loads(results.read_text()), requests // 2


@pytest.mark.parametrize("candidate, pooled_verdict, resumed", [
    ("skill-597", "inconclusive", False),  # about 0.4 points worse: settled on 3 of the 8 blocks of each task
    ("skill-592", "regressed", True),  # about 0.8 points worse, each task inside its margin: a diffuse drop
])
def test_stopped_tasks_score_on_until_their_suites_pooled_entry_is_settled(pooled_quiz, candidate, pooled_verdict,
                                                                           resumed):
    """In one process a task of a suite with pooled entries stops on its own verdict; the pooled entry then looks at
    the same first share of every task, a larger one while the full run could still find it regressed, the tasks
    that stopped before it scoring on (gate/early_stop.py, "Pooled entries")."""
    full, full_document, _ = gate_pooled(pooled_quiz, candidate)
    early, document, scored = gate_pooled(pooled_quiz, candidate, "--early-stop")
    jsonschema.validate(document, json.loads(RESULTS_SCHEMA.read_text()))
    [full_pooled], [pooled] = full_document["pooled"], document["pooled"]
    assert pooled["verdict"] == full_pooled["verdict"] == pooled_verdict and early.ret == full.ret
    stops = sum(outcome["n_documents"] for outcome in document["gate"].values())
    assert all("stopped early (cannot regress)" in outcome["note"] for outcome in document["gate"].values())
    assert pooled["n"] + pooled["unscored"] == 3 * DOCUMENTS and pooled["n"] == scored
    if resumed:  # scored on past the tasks' own stops, to every document
        assert stops < scored == 3 * DOCUMENTS and pooled["unscored"] == 0
        early.stdout.fnmatch_lines(["*the gate fails: 1 pooled entry regressed (quiz acc)*"])
    else:
        assert scored <= 3 * DOCUMENTS // 2 and pooled["unscored"] > 0
        early.stdout.fnmatch_lines([f"*quiz*acc*3*{scored:,} of {3 * DOCUMENTS:,}*{pooled_verdict}*",
                                    "n 'k of N': --early-stop scored k of the pooled tasks' N documents*"])


def verdicts(document):
    """Each task's verdict and its entries', and the pooled entries', from a results JSON."""
    return ({key: (outcome["status"], [entry["verdict"] for entry in outcome["entries"]])
             for key, outcome in document["gate"].items()}, [pooled["verdict"] for pooled in document["pooled"]])


@pytest.mark.parametrize("candidate, differs", [
    # the full run passes every task; stopped early, each task's pass is known by the time it cannot regress
    ("skill-597", False),
    ("skill-606", True),  # the full run's pooled entry is improved; stopped early, pass
])
def test_early_stop_verdicts_reports_the_full_runs_verdicts_not_only_its_decision(pooled_quiz, candidate, differs):
    full, full_document, _ = gate_pooled(pooled_quiz, candidate)
    decision, decision_document, _ = gate_pooled(pooled_quiz, candidate, "--early-stop")
    same, same_document, _ = gate_pooled(pooled_quiz, candidate, "--early-stop", "--early-stop-verdicts")
    assert full.ret == decision.ret == same.ret == pytest.ExitCode.OK  # the release decision: the full run's
    assert (verdicts(decision_document) != verdicts(full_document)) is differs
    assert verdicts(same_document) == verdicts(full_document)
    assert any("stopped early" in outcome["note"] for outcome in same_document["gate"].values())


def own_outcomes(document):
    """Each task's outcome from a results JSON but its integrity counts, which are of every document its run scored:
    at its own stop and for the pooled looks."""
    return {key: {**outcome, "integrity": None} for key, outcome in document["gate"].items()}


def test_a_task_that_cannot_score_on_for_its_pooled_entry_fails_the_session(pooled_quiz, monkeypatch):
    """Where a pooled look must score on past a task's stop and that scoring fails, the session fails naming the
    task and the problem, and the unsettled pooled entry is not reported as the full run's verdict."""
    _, document, _ = gate_pooled(pooled_quiz, "skill-592", "--early-stop")
    own_stops = sum(outcome["n_documents"] for outcome in document["gate"].values())
    assert own_stops < 3 * DOCUMENTS  # the pooled looks score on (the test above)
    monkeypatch.setenv("SKILLED_NAN_AFTER", str(2 * own_stops))  # every request past the tasks' own stops

    run, broken, _ = gate_pooled(pooled_quiz, "skill-592", "--early-stop")
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    run.assert_outcomes(passed=3)  # each task's own verdict stands
    assert own_outcomes(broken) == own_outcomes(document)
    run.stdout.fnmatch_lines(["*the gate fails: quiz/quiz_*: could not score on for the pooled entries of quiz: "
                              "*quiz_*.yaml: task 'quiz_*', document *: the model gave a non-finite log-likelihood*"])
    [pooled] = broken["pooled"]
    assert pooled["verdict"] == "inconclusive" and pooled["unscored"] > 0


def test_under_xdist_a_task_keeps_its_documents_while_it_could_add_to_a_diffuse_drop(pooled_quiz):
    """An xdist worker cannot score on after its task reported: there each task of a suite with pooled entries keeps
    its documents itself (EarlyStop's "task"), and the diffuse drop is still caught."""
    results = pooled_quiz.path / "results.json"
    run = pooled_quiz.runpytest_subprocess("-p", "no:cacheprovider", "--backend=skilled:make", "--model=skill-592",
                                           "--no-cache", f"--results-json={results}", "suites/quiz", "--early-stop",
                                           "-n", "2")
    [pooled] = json.loads(results.read_text())["pooled"]
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    assert pooled["verdict"] == "regressed" and pooled["unscored"] == 0 and pooled["n"] == 3 * DOCUMENTS
