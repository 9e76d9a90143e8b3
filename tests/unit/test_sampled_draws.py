"""Sampled tasks with `repeats` (issue 52): each document asked once per draw, adjacent, as lm-eval clones a
document's request; lm-eval's selection filters over the draws (take_first, take_first_k, majority_vote); pass@K
over the draws with the unbiased estimator; and the checks of it."""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path

import pytest

from pytest_modelbench.errors import DocumentError, TaskConfigError
from pytest_modelbench.metrics.generative import pass_at_k
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.front import ScoringFront, generation_requests
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task

# Per document (gold "A"), the letters its five draws answer, in draw order.
DRAWS = {0: "AAAAA", 1: "ABBAB", 2: "BBBBB", 3: "BACAB", 4: "CCBAA"}


def write_task(tmp_path: Path, metrics: str = "  - metric: exact_match\n", repeats: int = 5, sampled: bool = True,
               filters: str | None = None) -> Path:
    rows = [{"question": f"Question {i}?", "answer": "A"} for i in DRAWS]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    decoding = "do_sample: true\n  temperature: 0.8\n  " if sampled else ""
    pipelines = filters if filters is not None else textwrap.dedent("""\
        - name: first
          filter: [{function: take_first}]
        - name: vote
          filter: [{function: majority_vote}, {function: take_first}]
        - name: draws
          filter: [{function: lowercase}, {function: uppercase}]
        """)
    (tmp_path / "task.yaml").write_text(
        "task: sampled\ndataset_path: json\ndataset_kwargs:\n  data_files: {test: test.jsonl}\ntest_split: test\n"
        "output_type: generate_until\ndoc_to_text: \"{{question}}\"\ndoc_to_target: answer\n"
        f"repeats: {repeats}\ngeneration_kwargs:\n  {decoding}until: [\"\\n\"]\n"
        f"metric_list:\n{metrics}filter_list:\n" + textwrap.indent(pipelines, "  "), encoding="utf-8")
    return tmp_path / "task.yaml"


class ScriptedDraws:
    """A backend (scoring/backend.py) whose draw `r` of document `d` answers DRAWS[d][r]; it records what it was
    asked."""

    def __init__(self):
        self.asked = []

    def generate(self, requests, on_batch=None):
        self.asked.extend(requests)
        return [DRAWS[int(request.context.split()[1].rstrip("?"))][request.draw] for request in requests]

    def describe(self):
        from pytest_modelbench.scoring.backend import BackendInfo

        return BackendInfo("scripted", "scripted:1", "causal", "", "cpu")


def evaluate(path: Path, seed: int = 1234):
    backend = ScriptedDraws()
    prepared = prepare_task(load_task_config(path), data_dir=path.parent, sampling_seed=seed)
    return evaluate_task(prepared, ScoringFront(backend)), backend


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 0.4),  # c/n
    (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (5, 2, 4, 1.0),  # only 3 wrong draws: any 4 hold a right one
    (5, 0, 3, 0.0),
    (5, 5, 1, 1.0),
    (10, 1, 5, 0.5),  # 1 - C(9,5)/C(10,5) = 1 - 126/252
    (1, 1, 1, 1.0),
])
def test_pass_at_k_is_the_unbiased_estimator_on_hand_computed_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_equals_chens_product_form_and_the_chance_over_every_k_subset():
    """Two independent forms: the numerically stable product of Chen et al.'s code, and the share of the C(n, k)
    subsets of draws that hold a right one, counted by brute force."""
    from itertools import combinations

    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                product = 1.0 if n - c < k else 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))
                draws = [True] * c + [False] * (n - c)
                subsets = [any(subset) for subset in combinations(draws, k)]
                assert pass_at_k(n, c, k) == pytest.approx(product, abs=1e-12)
                assert pass_at_k(n, c, k) == pytest.approx(sum(subsets) / len(subsets), abs=1e-12)


def test_each_document_is_asked_once_per_draw_adjacent_with_the_runs_seed(tmp_path):
    evaluation, backend = evaluate(write_task(tmp_path), seed=99)
    assert [(request.context, request.draw) for request in backend.asked] == [
        (f"Question {d}?", r) for d in DRAWS for r in range(5)]
    assert {request.seed for request in backend.asked} == {99}
    assert evaluation.generations == [list(draws) for draws in DRAWS.values()]


def test_lm_evals_selection_filters_over_the_draws(tmp_path):
    evaluation, _ = evaluate(write_task(tmp_path))
    assert [a["first"] for a in evaluation.answers] == ["A", "A", "B", "B", "C"]
    # majority vote, a tie going to the answer drawn first: document 3 draws B, A, C, A, B
    assert [a["vote"] for a in evaluation.answers] == ["A", "B", "B", "B", "C"]
    assert [a.samples["draws"] for a in evaluation.answers] == [list(draws) for draws in DRAWS.values()]
    per_document = evaluation.scores.per_document
    assert list(per_document["exact_match,first"]) == [1, 1, 0, 0, 0]
    assert list(per_document["exact_match,vote"]) == [1, 0, 0, 0, 0]


def test_pass_at_k_over_the_draws_per_document_and_its_mean(tmp_path):
    metrics = "  - metric: pass@1\n  - metric: pass@3\n"
    evaluation, _ = evaluate(write_task(tmp_path, metrics, filters="- name: draws\n  filter: [{function: lowercase}, "
                                                                  "{function: uppercase}]\n"))
    right = [draws.count("A") for draws in DRAWS.values()]  # 5, 2, 0, 2, 2
    assert list(evaluation.scores.per_document["pass@1,draws"]) == pytest.approx([c / 5 for c in right])
    assert list(evaluation.scores.per_document["pass@3,draws"]) == pytest.approx([pass_at_k(5, c, 3) for c in right])
    assert evaluation.scores.overall["pass@1,draws"].value == pytest.approx(11 / 25)
    metric = {m.name: m for m in resolve_metrics(load_task_config(tmp_path / "task.yaml"))}["pass@3,draws"]
    assert not metric.binary  # a share: the gate's paired bootstrap, with the draws' noise inside its variance


def test_a_pipeline_ending_with_take_first_gives_pass_at_k_its_one_answer(tmp_path):
    evaluation, _ = evaluate(write_task(tmp_path, "  - metric: pass@2\n",
                                        filters="- name: first\n  filter: [{function: take_first}]\n"))
    # its one answer stands for every draw: right in all five or in none
    assert list(evaluation.scores.per_document["pass@2,first"]) == [1, 1, 0, 0, 0]


def test_take_first_k_keeps_the_first_draws_and_needs_enough_of_them(tmp_path):
    evaluation, _ = evaluate(write_task(tmp_path, "  - metric: pass@1\n",
                                        filters="- name: two\n  filter: [{function: take_first_k, k: 2}]\n"))
    assert [a.samples["two"] for a in evaluation.answers] == [list(draws[:2]) for draws in DRAWS.values()]
    with pytest.raises(DocumentError, match=r"document 0, filter 'six': take_first_k needs 6 responses and the "
                                            r"document has 5: set the task's repeats to 6 or more"):
        evaluate(write_task(tmp_path, filters="- name: six\n  filter: [{function: take_first_k, k: 6}]\n"))


def test_greedy_repeats_generate_once_and_copy(tmp_path):
    path = write_task(tmp_path, "  - metric: pass@1\n", sampled=False)
    prepared = prepare_task(load_task_config(path), data_dir=path.parent)
    assert [request.draw for request in generation_requests(prepared)] == [0] * len(DRAWS)
    evaluation, _ = evaluate(path)
    assert [a.samples["draws"] for a in evaluation.answers] == [[draws[0]] * 5 for draws in DRAWS.values()]


@pytest.mark.parametrize("metrics, sampled, message", [
    ("  - metric: pass@6\n", True, "metric 'pass@6' needs at least 6 draws a document, and the task samples 5"),
    ("  - metric: pass@2\n", False, "metric 'pass@2' needs at least 2 draws a document, and the task decodes "
                                    "greedily"),
    ("  - metric: pass@0\n", True, "unknown metric 'pass@0'"),
    ("  - metric: pass@2\n    ignore_case: true\n    k: 2\n", True, "'metric_list[0].k' is not an option of pass@2"),
])
def test_pass_at_k_entries_are_checked_against_the_draws(tmp_path, metrics, sampled, message):
    with pytest.raises(TaskConfigError, match=re.escape(message)):
        resolve_metrics(load_task_config(write_task(tmp_path, metrics, sampled=sampled)))
