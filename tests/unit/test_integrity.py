"""Integrity before quality, the gate core's part (gate/integrity.py, docs/integrity.md): which answers count as
invalid, the limits and where they come from, the documents dropped from both sides of the pairing, a legacy
baseline without the invalid_output entry, and the exit status a session of integrity failures gets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.gate.decision import EXIT_STATUS_FAIL, EXIT_STATUS_INTEGRITY, SessionDecision
from pytest_modelbench.gate.integrity import (
    DEFAULT_MAX_UNSCORED, DocumentProblem, IntegrityLimits, TaskIntegrity, combined, comparable_candidate,
    integrity_problems, limits_for, paired_baseline, why_invalid,
)
from pytest_modelbench.gate.baseline import MetricInfo, Tolerance, rebaseline_problem, record_from_evaluation
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.result import STATUS_COMPARED, STATUS_ERROR, GateResult
from pytest_modelbench.run.evaluation import BlockScoring, evaluate_task
from pytest_modelbench.scoring.backend import BackendInfo, Unscored
from pytest_modelbench.scoring.front import ScoringFront
from pytest_modelbench.tasks.filters import INVALID_OUTPUT, filter_pipelines, invalid_outputs
from pytest_modelbench.tasks.gate_block import GateTolerance
from tests.fixtures.gate_records import ACC, make_record, provenance
from tests.fixtures.toy_tasks import toy_task

PIPELINES = [
    {"name": "strict", "filter": [{"function": "regex", "regex_pattern": r"#### (\d+)"}, {"function": "take_first"}]},
    {"name": "flexible", "filter": [{"function": "regex", "regex_pattern": r"(\d+)", "fallback": "none found"},
                                    {"function": "take_first"}]},
    {"name": "raw", "filter": [{"function": "lowercase"}, {"function": "take_first"}]},
]


def test_an_answer_is_invalid_only_when_no_parsing_pipeline_parses_it():
    pipelines = filter_pipelines(PIPELINES, Path("t.yaml"))
    answers = [{"strict": "[invalid]", "flexible": "12", "raw": "x"},  # the flexible pipeline parsed it
               {"strict": "[invalid]", "flexible": "none found", "raw": "x"},  # each answered its own fallback
               {"strict": "7", "flexible": "7", "raw": "x"}]
    assert invalid_outputs(pipelines, answers) == [False, True, False]
    assert invalid_outputs(filter_pipelines(PIPELINES[2:], Path("t.yaml")), answers) is None  # nothing parses


def _integrity(unscored: dict[int, str | None], documents: int = 200, invalid: int = 0) -> TaskIntegrity:
    categories = {"a": documents // 2, "b": documents // 2}
    problems = tuple(DocumentProblem(d, category, "HTTP 500") for d, category in unscored.items())
    flags = tuple([True] * invalid + [False] * (documents - len(unscored) - invalid))
    return TaskIntegrity(documents, categories, problems, tuple(f"k{d}" for d in unscored),
                         invalid=tuple(DocumentProblem(i, "a", "'?'") for i in range(invalid)), invalid_flags=flags)


def test_the_unscored_share_is_checked_overall_and_per_category_and_recording_takes_every_document():
    limits = IntegrityLimits()
    assert integrity_problems(_integrity({1: "a", 2: "b"}), limits, recording=False) == []  # 1% of 200, of 100
    assert integrity_problems(_integrity({1: "a", 2: "a"}), limits, recording=False) == [
        "category a: 2 of 100 documents unscored (2.0%, limit 1.0%)"]
    assert integrity_problems(_integrity({d: "a" for d in range(3)}), limits, recording=False) == [
        "3 of 200 documents unscored (1.5%, limit 1.0%)"]
    assert integrity_problems(_integrity({1: "a"}), limits, recording=True) == [
        "1 of 200 documents unscored, and a baseline is recorded only from a run that scored every document"]


def test_blocks_of_one_task_add_up_by_category_and_a_group_counts_each_leaf_as_a_category():
    first, second = _integrity({1: "a"}), dataclasses.replace(_integrity({7: "b", 8: "b"}), retried=3)
    blocks = combined([first, second])
    assert (blocks.documents, blocks.categories, blocks.retried) == (400, {"a": 200, "b": 200}, 3)
    assert [(p.doc_id, p.category) for p in blocks.unscored] == [(1, "a"), (7, "b"), (8, "b")]
    assert blocks.unscored_keys == ("k1", "k7", "k8")
    assert integrity_problems(blocks, IntegrityLimits(), recording=False) == []  # 2 of 200 in b: exactly 1%
    group = combined([first, second], ["leaf_x", "leaf_y"])
    assert group.categories == {"leaf_x": 200, "leaf_y": 200}
    assert [(p.doc_id, p.category) for p in group.unscored] == [(1, "leaf_x"), (7, "leaf_y"), (8, "leaf_y")]
    assert group.invalid == () and group.invalid_flags is None  # a group has no invalid-output entry


def test_the_invalid_share_has_no_limit_unless_one_is_set():
    integrity = _integrity({}, invalid=200)
    assert integrity_problems(integrity, IntegrityLimits(), recording=False) == []
    assert integrity_problems(integrity, IntegrityLimits(max_invalid=0.5), recording=False) == [
        "200 of 200 answers no filter could parse (100.0%, limit 50.0%)"]


def test_limits_come_from_the_command_line_then_the_yaml_then_the_defaults():
    yaml = GateTolerance(max_unscored=0.05)
    assert limits_for(yaml, {}) == IntegrityLimits(0.05, 1.0)
    assert limits_for(yaml, {"max_unscored": 0.0, "max_invalid": 0.2}) == IntegrityLimits(0.0, 0.2)
    assert limits_for(GateTolerance(), {}) == IntegrityLimits(DEFAULT_MAX_UNSCORED, 1.0)


def test_unscored_documents_are_dropped_from_both_sides_of_the_pairing():
    baseline = make_record({"acc": [1, 1, 1, 1, 0, 0]})
    keys = baseline.doc_keys
    # the candidate scored documents 0-3: its two unscored documents were the baseline's two failures
    candidate = make_record({"acc": [1, 1, 1, 1]}, keys=keys[:4])
    assert rebaseline_problem(baseline, candidate) is not None  # as it is, not comparable
    paired = paired_baseline(baseline, candidate, keys[4:])
    assert rebaseline_problem(paired, candidate) is None
    entry = compare(paired, candidate, candidate.tolerance).entries[0]
    assert (entry.n, entry.baseline, entry.candidate) == (4, 1.0, 1.0)  # not 4/6 against 4/4: no false improvement
    # documents missing that the run did not leave unscored: the baseline stays whole (re-baseline required)
    assert paired_baseline(baseline, candidate, keys[5:]) is baseline


class FirstAskFails:
    """Answers -1 for every request, except that a request about `question` asked for the first time times out (its
    re-send, for an exact repeat of its document, is answered)."""

    def __init__(self, question: str = "no question"):
        self.question = question
        self.asked: set[tuple[str, str]] = set()

    def loglikelihoods(self, requests, on_batch=None):
        values = []
        for request in requests:
            first = (request.context, request.continuation) not in self.asked
            self.asked.add((request.context, request.continuation))
            values.append(Unscored("timed out") if first and self.question in request.context else -1.0)
        return values

    def describe(self) -> BackendInfo:
        return BackendInfo("test/first-ask-fails", "test:first-ask-fails", "causal", "", "nowhere")


def _keys(evaluation) -> tuple[str, ...]:
    return record_from_evaluation(evaluation, suite="s", baseline_name="default", provenance=provenance(),
                                  tolerance=Tolerance()).doc_keys


def test_a_documents_key_is_numbered_over_the_whole_task_whichever_documents_are_scored_and_in_which_block(tmp_path):
    rows = [{"q": f"Q{i}?", "choices": ["yes", "no"], "label": 0} for i in range(4)]
    rows.append(rows[0])  # document 4 repeats document 0 exactly
    prepared = toy_task(tmp_path, rows, "multiple_choice",
                        'doc_to_text: "Question: {{q}}\\nAnswer:"\ndoc_to_target: label\ndoc_to_choice: choices\n')
    whole = _keys(evaluate_task(prepared, ScoringFront(FirstAskFails())))
    assert whole[4] == whole[0] + "#2"

    # the first copy times out: its key is the unscored one, and its repeat keeps its own
    evaluation = evaluate_task(prepared, ScoringFront(FirstAskFails("Q0?")))
    assert evaluation.integrity.unscored_keys == whole[:1]
    assert _keys(evaluation) == whole[1:]

    # --early-stop's blocks: the repeat scored in the first block, without its first copy, and then left unscored
    blocks = [[4, 1], [0, 2, 3]]
    assert _keys(BlockScoring(prepared, ScoringFront(FirstAskFails()), blocks).score_next()) == (whole[1], whole[4])
    scoring = BlockScoring(prepared, ScoringFront(FirstAskFails("Q0?")), blocks)
    assert _keys(scoring.score_next()) == (whole[1],)
    evaluation = scoring.score_next()
    assert evaluation.integrity.unscored_keys == whole[4:]
    assert _keys(evaluation) == whole[:4]


def test_a_baseline_recorded_before_the_invalid_output_entry_is_compared_on_the_entries_it_has():
    invalid = MetricInfo(INVALID_OUTPUT, "lower", None, True)
    baseline = make_record({"acc": [1, 0, 1]})
    candidate = make_record({"acc": [1, 0, 1], INVALID_OUTPUT: [0, 1, 0]}, metrics=[ACC, invalid])
    assert rebaseline_problem(baseline, candidate) is not None
    compared = comparable_candidate(baseline, candidate)
    assert rebaseline_problem(baseline, compared) is None and INVALID_OUTPUT not in compared.values
    assert comparable_candidate(candidate, candidate) is candidate  # a baseline with the entry: compared on it
    assert np.array_equal(candidate.values[INVALID_OUTPUT], [0, 1, 0])


def test_the_invalid_output_note_gives_the_regressed_entrys_own_count_and_baseline():
    """Issue 49, 5: category b's answers stop parsing (none of 100 → 30), a's stay as they were (20 of 100); the
    note of b's entry, the worst, is b's count and b's baseline, and the task-wide entry's is the task's."""
    categories = ["a"] * 100 + ["b"] * 100
    before = np.zeros(200)
    before[:20] = 1
    after = before.copy()
    after[100:130] = 1
    invalid = [MetricInfo(INVALID_OUTPUT, "lower", None, True)]
    baseline = make_record({INVALID_OUTPUT: before}, categories, metrics=invalid)
    candidate = make_record({INVALID_OUTPUT: after}, categories, metrics=invalid)
    regressed = compare(baseline, candidate, candidate.tolerance).regressed
    assert [e.label for e in regressed] == ["b", "(all)"]
    counted = TaskIntegrity(200, {"a": 100, "b": 100}, invalid=tuple(
        DocumentProblem(d, categories[d], f"'answer {d}'") for d in np.flatnonzero(after)),
        invalid_flags=tuple(after.astype(bool))).as_json()
    assert why_invalid(regressed, counted) == \
        "invalid_output [b]: 30 of 100 answers no filter could parse (baseline: 0.0%)"
    assert why_invalid(regressed[1:], counted) == \
        "invalid_output: 50 of 200 answers no filter could parse (baseline: 10.0%), e.g. document 0: 'answer 0'"


def _result(task: str, status: str, verdict: str | None = None) -> GateResult:
    return GateResult(task=task, status=status, verdict=verdict, baseline="b", baseline_name="default",
                      nodeid=f"{task}.yaml::{task}", failed=status == STATUS_ERROR or verdict == "regressed")


@pytest.mark.parametrize(("results", "failed_tests", "status"), [
    ([_result("s/a", STATUS_ERROR), _result("s/b", STATUS_COMPARED, "pass")], set(), EXIT_STATUS_INTEGRITY),
    ([_result("s/a", STATUS_ERROR), _result("s/b", STATUS_COMPARED, "regressed")], set(), EXIT_STATUS_FAIL),
    ([_result("s/a", STATUS_ERROR)], {"test_x.py::test_custom"}, EXIT_STATUS_FAIL),
    ([_result("s/b", STATUS_COMPARED, "pass")], set(), 0),
])
def test_a_session_whose_only_failures_are_runs_exits_7_and_a_quality_failure_wins(results, failed_tests, status):
    decision = SessionDecision("default", results=results, failed_tests={r.nodeid for r in results if r.failed}
                               | failed_tests, pytest_status=1 if status else 0)
    assert decision.outcome().exit_status == status
    assert decision.outcome_json()["exit_status"] == status


def test_limits_out_of_range_are_refused_naming_the_option_or_key(tmp_path):
    from pytest_modelbench.errors import TaskConfigError
    from pytest_modelbench.gate.policy import GateOptionError, checked_overrides
    from pytest_modelbench.tasks.gate_block import checked_gate_block

    with pytest.raises(GateOptionError, match=r"--max-unscored must be a share of the documents, between 0 and 1, "
                                              r"got 2\.0"):
        checked_overrides({"--max-unscored": 2.0})
    assert checked_overrides({"--max-invalid": 0.5, "--max-unscored": None}) == {"max_invalid": 0.5}
    with pytest.raises(TaskConfigError, match=r"t\.yaml: key 'modelbench\.gate\.max_invalid' must be a share"):
        checked_gate_block({"max_invalid": -0.1}, tmp_path / "t.yaml")
