"""Task code under --allow-task-code: `process_results: !function` (lm-eval 0.4.13's contract), its metrics'
aggregations (mean, median, !function), the gate on its per-document values, and the errors of bad task code."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.errors import DocumentError, MetricError, TaskConfigError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.gate.baseline import Tolerance, record_from_evaluation
from pytest_modelbench.gate.baseline_file import dumps
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.gate.judge import gate_texts
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.gate_records import provenance

MC2 = Path(__file__).resolve().parent.parent / "fixtures" / "truthfulqa_mc2"
UTILS = '''
import math

def mc2(doc, results):
    lls, _ = zip(*results)
    true_count = doc["labels"].count(1)
    masses = [math.exp(ll) for ll in lls]
    return {"mass": sum(masses[:true_count]) / sum(masses), "acc": float(lls.index(max(lls)) < true_count)}

def largest(items):
    return max(items)

def not_a_dict(doc, results):
    return [1.0]

def extra_metric(doc, results):
    return {"mass": 1.0, "acc": 0.0, "surprise": 2.0}

def text_value(doc, results):
    return {"mass": "high", "acc": 0.0}

def not_finite(doc, results):
    return {"mass": float(doc["mass"]), "acc": 0.0}

def infinite(items):
    return math.inf

def uses_greedy(doc, results):
    return {"mass": float(any(greedy for _, greedy in results)), "acc": 0.0}

def loglikelihood_pair(doc, results):
    (ll, greedy), = results
    return {"mass": ll, "acc": float(greedy)}

def lazy_import(doc, results):
    from lm_eval.tasks.ifeval import instructions_registry
    return {}

def generated(doc, results):
    return {"mass": float(results[0].strip() == doc["answer"]), "acc": float(len(results) == 1)}
'''
ROWS = [{"question": f"Question {i}?", "choices": [f"yes {i}", f"true {i}", f"no {i}", "maybe"],
         "labels": [1, 1, 0, 0], "answer": "yes"} for i in range(8)]


TARGETS = {"multiple_choice": "doc_to_target: 0\ndoc_to_choice: choices", "loglikelihood": 'doc_to_target: " yes"',
           "generate_until": "doc_to_target: answer"}


def write_task(tmp_path, function="mc2", aggregation="mean", output_type="multiple_choice", extra=""):
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (tmp_path / "task.yaml").write_text(textwrap.dedent(f"""
        task: mc2_like
        dataset_path: json
        dataset_kwargs:
          data_files: {{test: test.jsonl}}
        test_split: test
        output_type: {output_type}
        doc_to_text: "Q: {{{{question}}}}\\nA:"
        {{targets}}
        process_results: !function utils.{function}
        metric_list:
          - metric: mass
            aggregation: {aggregation}
            higher_is_better: true
          - metric: acc
        """).replace("{targets}", TARGETS[output_type]) + textwrap.dedent(extra), encoding="utf-8")
    return load_task_config(tmp_path / "task.yaml", allow_task_code=True)


class FixedLogLikelihoods:
    """A backend whose log-likelihoods are given: document i's choices get rows[i]."""

    def __init__(self, rows):
        self.rows = rows

    def score_task(self, prepared):
        return [ll for doc in prepared.documents for ll in self.rows[doc.doc_id]]


def mc2_mass(lls, true_count=2):
    total = sum(math.exp(ll) for ll in lls)
    return sum(math.exp(ll) for ll in lls[:true_count]) / total


def test_values_per_document_and_their_mean(tiny_loaded, tmp_path):
    prepared = prepare_task(write_task(tmp_path), data_dir=tmp_path)
    evaluation = evaluate_task(prepared, CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer))
    expected = [mc2_mass(lls) for lls in evaluation.loglikelihoods]
    assert len(set(np.round(expected, 6))) > 1  # the documents differ, so a value paired with another would show
    np.testing.assert_allclose(evaluation.scores.per_document["mass"], expected, rtol=1e-12)
    best = [float(int(np.argmax(lls)) < 2) for lls in evaluation.loglikelihoods]
    np.testing.assert_array_equal(evaluation.scores.per_document["acc"], best)
    assert evaluation.scores.overall["mass"].value == pytest.approx(np.mean(expected), rel=1e-12)
    assert evaluation.scores.overall["mass"].stderr == pytest.approx(np.std(expected, ddof=1) / math.sqrt(8))


def test_the_truthfulqa_mc2_fixture_is_scored_as_its_utils_define(tmp_path):
    shutil.copytree(MC2, tmp_path / "tqa")
    config = load_task_config(tmp_path / "tqa" / "truthfulqa_mc2.yaml", allow_task_code=True)
    prepared = prepare_task(config, data_dir=tmp_path / "tqa")
    rows = [[-1.0 - 0.5 * i - j for j in range(len(doc.continuations))] for i, doc in enumerate(prepared.documents)]
    evaluation = evaluate_task(prepared, FixedLogLikelihoods(rows))
    docs = [json.loads(line) for line in (MC2 / "validation.jsonl").read_text().splitlines()]
    expected = [mc2_mass(lls, doc["mc2_targets"]["labels"].count(1)) for lls, doc in zip(rows, docs)]
    np.testing.assert_allclose(evaluation.scores.per_document["acc"], expected, rtol=1e-12)


def lm_eval_median(values):
    """lm-eval 0.4.13's api/metrics.py median: sorted(arr)[len(arr) // 2] (with 8 documents, not numpy's average)."""
    return sorted(values)[len(values) // 2]


@pytest.mark.parametrize("aggregation, expected", [("median", lm_eval_median), ("!function utils.largest", max)])
def test_other_aggregations(tmp_path, aggregation, expected):
    prepared = prepare_task(write_task(tmp_path, aggregation=aggregation), data_dir=tmp_path)
    rows = [[-1.0 - i, -2.0, -0.5 * i, -3.0] for i in range(8)]
    evaluation = evaluate_task(prepared, FixedLogLikelihoods(rows))
    values = [mc2_mass(lls) for lls in rows]
    assert evaluation.scores.overall["mass"].value == pytest.approx(float(expected(values)), rel=1e-12)
    assert evaluation.scores.overall["mass"].stderr is None


def test_an_aggregation_that_is_not_lm_evals_or_a_function_is_refused(tmp_path):
    with pytest.raises(TaskConfigError, match=r"task.yaml: key 'metric_list\[0\].aggregation'.*'bleu'"):
        write_task(tmp_path, aggregation="bleu")


def test_a_direction_is_needed_for_a_metric_lm_eval_does_not_register(tmp_path):
    config = write_task(tmp_path)
    text = (tmp_path / "task.yaml").read_text().replace("    higher_is_better: true\n", "")
    (tmp_path / "task.yaml").write_text(text)
    from pytest_modelbench.metrics.task_metrics import resolve_metrics

    assert [m.direction.kind for m in resolve_metrics(config)] == ["higher", "higher"]  # acc: lm-eval's default
    with pytest.raises(TaskConfigError, match=r"metric_list\[0\].higher_is_better' is needed: 'mass'"):
        resolve_metrics(load_task_config(tmp_path / "task.yaml", allow_task_code=True))


IDEAL_HALF = "modelbench:\n  gate:\n    metrics:\n      mass: {ideal: 0.5}\n"


def test_an_ideal_point_orients_the_gate_by_the_distance_from_it(tmp_path):
    """A bias score is best at 0 and runs to -1 and 1; lm-eval's higher_is_better: false alone made a move from the
    ideal to the far side an improvement. `modelbench.gate.metrics.<metric>.ideal` makes it the regression it is."""
    write_task(tmp_path, extra=IDEAL_HALF)
    task_yaml = tmp_path / "task.yaml"
    task_yaml.write_text(task_yaml.read_text().replace("higher_is_better: true", "higher_is_better: false"))
    config = load_task_config(task_yaml, allow_task_code=True)
    prepared = prepare_task(config, data_dir=tmp_path)
    from pytest_modelbench.metrics.task_metrics import resolve_metrics

    mass = next(m for m in resolve_metrics(config) if m.name == "mass")
    assert (mass.direction.kind, mass.direction.ideal) == ("ideal", 0.5)
    rng = np.random.default_rng(1)
    at_ideal = [[-1.0, -1.0, -1.0, -1.0] + rng.normal(0, 0.05, 4) for _ in prepared.documents]  # mass about 0.5
    far_below = [[-4.0, -4.0, -0.5, -0.5] + rng.normal(0, 0.05, 4) for _ in prepared.documents]  # mass about 0.03
    texts = [dumps(record_from_evaluation(evaluate_task(prepared, FixedLogLikelihoods(rows)), suite="s",
                                          baseline_name="default", provenance=provenance(),
                                          tolerance=Tolerance(absolute_margin=0.01, alpha=0.05)))
             for rows in (far_below, at_ideal)]
    entry = next(e for e in gate_texts(texts[0], texts[1], prepared.documents).comparison.entries if e.metric == "mass")
    assert entry.direction == "ideal 0.5" and entry.delta < -0.4 and entry.verdict is Verdict.REGRESSED


@pytest.mark.parametrize("value, message", [
    ("zero", "must be a number .*got 'zero'"), (".nan", "must be a number .*got nan"),
])
def test_an_ideal_point_that_is_not_a_number_names_the_file_and_key(tmp_path, value, message):
    with pytest.raises(TaskConfigError, match=r"task.yaml: key 'modelbench.gate.metrics.mass.ideal' " + message):
        write_task(tmp_path, extra=IDEAL_HALF.replace("0.5", value))


@pytest.mark.parametrize("aggregation", ["mean", "median"])
def test_the_gate_pairs_documents_and_a_worse_model_regresses(tmp_path, aggregation):
    prepared = prepare_task(write_task(tmp_path, aggregation=aggregation), data_dir=tmp_path)
    rng = np.random.default_rng(0)
    documents = prepared.documents * 1
    good = [[-0.5, -0.7, -3.0, -3.5] + rng.normal(0, 0.1, 4) for _ in documents]
    bad = [[-3.0, -3.5, -0.5, -0.7] + rng.normal(0, 0.1, 4) for _ in documents]
    tolerance = Tolerance(absolute_margin=0.01, alpha=0.05)

    def gated(rows, baseline_rows):
        texts = []
        for backend_rows in (rows, baseline_rows):
            evaluation = evaluate_task(prepared, FixedLogLikelihoods([list(r) for r in backend_rows]))
            texts.append(dumps(record_from_evaluation(evaluation, suite="s", baseline_name="default",
                                                      provenance=provenance(), tolerance=tolerance)))
        aggregates = {m.name: m.aggregate for m in evaluation.scores.metrics if m.aggregate is not None}
        return gate_texts(texts[0], texts[1], prepared.documents, aggregates).comparison

    same = gated(good, good)
    assert {e.verdict for e in same.entries} == {Verdict.PASS}
    worse = gated(bad, good)
    mass = next(e for e in worse.entries if e.metric == "mass")
    assert mass.verdict is Verdict.REGRESSED and mass.test == "bootstrap" and mass.delta < -0.5


def test_a_result_that_is_not_a_dict_names_the_file_and_document(tmp_path):
    prepared = prepare_task(write_task(tmp_path, function="not_a_dict"), data_dir=tmp_path)
    with pytest.raises(DocumentError, match=r"task.yaml: task 'mc2_like', document 0: process_results "
                                            r"\(!function utils.not_a_dict\) returned list .*not a dict"):
        evaluate_task(prepared, FixedLogLikelihoods([[-1.0] * 4] * 8))


def test_a_metric_not_in_metric_list_names_the_file_and_document(tmp_path):
    prepared = prepare_task(write_task(tmp_path, function="extra_metric"), data_dir=tmp_path)
    with pytest.raises(DocumentError, match=r"task.yaml: task 'mc2_like', document 0: .* returned metric "
                                            r"'surprise', which is not in metric_list \(mass, acc\)"):
        evaluate_task(prepared, FixedLogLikelihoods([[-1.0] * 4] * 8))


def test_a_value_that_is_not_a_number_is_refused(tmp_path):
    prepared = prepare_task(write_task(tmp_path, function="text_value"), data_dir=tmp_path)
    with pytest.raises(DocumentError, match=r"document 0: .* returned 'high' \(str\) for metric 'mass'"):
        evaluate_task(prepared, FixedLogLikelihoods([[-1.0] * 4] * 8))


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_value_that_is_not_finite_names_the_task_document_and_function(tmp_path, value):
    """NaN or infinity from process_results used to reach the scores (a traceback, or invalid JSON at the end)."""
    prepared = prepare_task(write_task(tmp_path, function="not_finite"), data_dir=tmp_path)
    rows = [dict(doc.doc, mass=0.5 if doc.doc_id != 3 else value) for doc in prepared.documents]
    prepared = dataclasses.replace(prepared, documents=tuple(
        dataclasses.replace(doc, doc=row) for doc, row in zip(prepared.documents, rows)))
    with pytest.raises(DocumentError, match=r"task.yaml: task 'mc2_like', document 3: process_results "
                                            rf"\(!function utils.not_finite\) returned {value} for metric 'mass'; "
                                            "a metric value must be a finite number"):
        evaluate_task(prepared, FixedLogLikelihoods([[-1.0] * 4] * 8))


def test_an_aggregation_that_returns_infinity_names_the_metric_and_function(tmp_path):
    prepared = prepare_task(write_task(tmp_path, aggregation="!function utils.infinite"), data_dir=tmp_path)
    with pytest.raises(MetricError, match=r"metric 'mass': aggregation !function utils.infinite returned inf "
                                          r"\(float\), not a finite number"):
        evaluate_task(prepared, FixedLogLikelihoods([[-1.0] * 4] * 8))


def test_is_greedy_of_a_choice_is_not_computed_and_using_it_is_an_error(tmp_path):
    prepared = prepare_task(write_task(tmp_path, function="uses_greedy"), data_dir=tmp_path)
    with pytest.raises(DocumentError, match=r"document 0: process_results !function utils.uses_greedy: it uses "
                                            r"is_greedy of a multiple_choice choice"):
        evaluate_task(prepared, FixedLogLikelihoods([[-1.0] * 4] * 8))


def test_loglikelihood_results_are_one_pair(tiny_loaded, tmp_path):
    config = write_task(tmp_path, function="loglikelihood_pair", output_type="loglikelihood")
    prepared = prepare_task(config, data_dir=tmp_path)
    evaluation = evaluate_task(prepared, CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer))
    np.testing.assert_array_equal(evaluation.scores.per_document["mass"], [lls[0] for lls in evaluation.loglikelihoods])
    np.testing.assert_array_equal(evaluation.scores.per_document["acc"], np.array(evaluation.greedy, float))


def test_generate_until_results_are_each_pipelines_answer(tmp_path):
    config = write_task(tmp_path, function="generated", output_type="generate_until", extra="""
        filter_list:
          - name: whole
            filter: [{function: take_first}]
          - name: first_word
            filter: [{function: regex, regex_pattern: "(\\\\w+)"}, {function: take_first}]
        """)

    class Answers:
        def generate_task(self, prepared):
            return [" yes, surely" if doc.doc_id % 2 else "no" for doc in prepared.documents]

    evaluation = evaluate_task(prepare_task(config, data_dir=tmp_path), Answers())
    assert [m.name for m in evaluation.scores.metrics] == [
        "mass,whole", "mass,first_word", "acc,whole", "acc,first_word"]
    np.testing.assert_array_equal(evaluation.scores.per_document["mass,whole"], [0.0] * 8)
    np.testing.assert_array_equal(evaluation.scores.per_document["mass,first_word"], [0.0, 1.0] * 4)


def test_task_code_that_imports_lm_eval_names_the_module_and_the_extra(tmp_path):
    write_task(tmp_path)
    (tmp_path / "utils.py").write_text("from lm_eval.tasks.ifeval import instructions_registry\n" + UTILS)
    with pytest.raises(TaskConfigError, match=r"task.yaml: key 'process_results': cannot load utils.mc2: it imports "
                                              r"module 'lm_eval'.*pytest-modelbench\[lmeval-task-code\]"):
        load_task_config(tmp_path / "task.yaml", allow_task_code=True)


def test_an_import_of_lm_eval_inside_the_function_names_the_document_and_the_extra(tmp_path):
    prepared = prepare_task(write_task(tmp_path, function="lazy_import"), data_dir=tmp_path)
    with pytest.raises(DocumentError, match=r"document 0: process_results !function utils.lazy_import: it imports "
                                            r"module 'lm_eval'.*pytest-modelbench\[lmeval-task-code\]"):
        evaluate_task(prepared, FixedLogLikelihoods([[-1.0] * 4] * 8))


def test_process_results_needs_allow_task_code(tmp_path):
    write_task(tmp_path)
    with pytest.raises(TaskConfigError, match=r"key 'process_results' uses '!function utils.mc2'.*--allow-task-code"):
        load_task_config(tmp_path / "task.yaml")


MC_UTILS = '''
def pairs(items):
    global SEEN
    SEEN = list(items)
    return sum(1.0 for gold, pred in items if gold == pred) / len(items) + 10.0

def smallest(items):
    return min(items) - 1.0
'''


def test_function_aggregations_of_a_multiple_choice_tasks_own_metrics(tmp_path):
    """lm-eval calls an `aggregation: !function` with the metric's per-document items: (gold, prediction) pairs for
    f1 and mcc, the values for the others; the gate re-applies it (its aggregate is the function)."""
    (tmp_path / "utils.py").write_text(MC_UTILS, encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (tmp_path / "task.yaml").write_text(textwrap.dedent("""
        task: mc_own
        dataset_path: json
        dataset_kwargs:
          data_files: {test: test.jsonl}
        test_split: test
        output_type: multiple_choice
        doc_to_text: "{{question}}"
        doc_to_target: "{{labels.index(0)}}"
        doc_to_choice: choices
        metric_list:
          - metric: f1
            aggregation: !function utils.pairs
          - metric: acc
            aggregation: !function utils.smallest
        """), encoding="utf-8")
    config = load_task_config(tmp_path / "task.yaml", allow_task_code=True)
    prepared = prepare_task(config, data_dir=tmp_path)
    rows = [[-1.0, -2.0, -0.5, -3.0] if i % 4 else [-0.1, -2.0, -0.5, -3.0] for i in range(8)]
    evaluation = evaluate_task(prepared, FixedLogLikelihoods(rows))
    # gold is choice 2 everywhere; documents 0 and 4 pick choice 0, the others choice 2
    assert evaluation.scores.overall["f1"].value == pytest.approx(6 / 8 + 10.0)
    assert evaluation.scores.overall["acc"].value == pytest.approx(-1.0)
    metrics = {m.name: m for m in evaluation.scores.metrics}
    assert metrics["f1"].aggregate({"f1": np.array([2.0, 0.0])}, prepared.documents[:2]) == pytest.approx(10.5)
    with pytest.raises(TaskConfigError, match=r"metric_list\[0\].aggregation' uses '!function utils.pairs'"):
        load_task_config(tmp_path / "task.yaml")


def test_a_function_aggregation_on_another_output_types_own_metric_is_refused(tmp_path):
    write_task(tmp_path, output_type="generate_until")
    text = (tmp_path / "task.yaml").read_text()
    text = text.replace("process_results: !function utils.mc2\n", "").replace(
        "metric: mass\n    aggregation: mean\n    higher_is_better: true\n  - metric: acc\n",
        "metric: exact_match\n    aggregation: !function utils.largest\n")
    (tmp_path / "task.yaml").write_text(text)
    with pytest.raises(TaskConfigError, match=r"task.yaml: key 'metric_list\[0\].aggregation': only 'mean' is "
                                              r"supported, got !function utils.largest"):
        load_task_config(tmp_path / "task.yaml", allow_task_code=True)


# --------------------------------------------------------------------------- list values (IFEval's inst_level_*)

LIST_UTILS = '''
SEEN = {}

def checks(doc, results):
    outcomes = [word in results[0].split() for word in doc["words"]]
    return {"all": all(outcomes), "each": outcomes}

def flat_mean(items):
    SEEN.setdefault("items", []).append([list(document) for document in items])
    outcomes = [outcome for document in items for outcome in document]
    return sum(outcomes) / len(outcomes)

def mixed(doc, results):
    return {"all": 1.0, "each": 1.0 if doc["kind"] == "b" else [True]}

def text_in_list(doc, results):
    return {"all": 1.0, "each": [True, "yes"]}

def nan_in_list(doc, results):
    return {"all": 1.0, "each": [float("nan")]}
'''
# 1 to 3 words to check per document (document 3 none: lm-eval passes an empty list as it is), two categories
LIST_ROWS = [{"question": f"Say {i}.", "words": ["alpha", "beta", "gamma"][: 0 if i == 3 else 1 + i % 3],
              "kind": "ab"[i % 2]} for i in range(16)]


def write_list_task(tmp_path, function="checks", aggregation="!function utils.flat_mean", all_aggregation="mean"):
    (tmp_path / "utils.py").write_text(LIST_UTILS, encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in LIST_ROWS), encoding="utf-8")
    (tmp_path / "task.yaml").write_text(textwrap.dedent(f"""
        task: ifeval_mini
        dataset_path: json
        dataset_kwargs:
          data_files: {{test: test.jsonl}}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{{{question}}}}"
        doc_to_target: 0
        generation_kwargs:
          until: []
          max_gen_toks: 8
        process_results: !function utils.{function}
        metric_list:
          - metric: all
            aggregation: {all_aggregation}
            higher_is_better: true
          - metric: each
            aggregation: {aggregation}
            higher_is_better: true
        modelbench:
          category_field: kind
        """), encoding="utf-8")
    return load_task_config(tmp_path / "task.yaml", allow_task_code=True)


class Answers:
    """A generate_until backend answering document i with answers[i]."""

    def __init__(self, answers):
        self.answers = answers

    def generate_task(self, prepared):
        return [self.answers[doc.doc_id] for doc in prepared.documents]


def expected_outcomes(answers):
    return [[word in answer.split() for word in row["words"]] for row, answer in zip(LIST_ROWS, answers)]


GOOD = ["alpha beta gamma" if i % 5 else "alpha" for i in range(16)]
BAD = ["alpha" if i % 5 else "beta gamma" for i in range(16)]


def test_list_values_reach_the_function_aggregation_as_each_documents_list(tmp_path):
    config = write_list_task(tmp_path)
    prepared = prepare_task(config, data_dir=tmp_path)
    evaluation = evaluate_task(prepared, Answers(GOOD))
    outcomes = expected_outcomes(GOOD)
    column = evaluation.scores.per_document["each,none"]
    assert column.dtype == object and [len(v) for v in column] == [len(o) for o in outcomes]
    assert [v.tolist() for v in column] == [[float(x) for x in o] for o in outcomes]
    np.testing.assert_array_equal(evaluation.scores.per_document["all,none"], [float(all(o)) for o in outcomes])
    flat = [x for o in outcomes for x in o]
    assert evaluation.scores.overall["each,none"].value == pytest.approx(sum(flat) / len(flat), rel=1e-12)
    assert evaluation.scores.overall["each,none"].value != pytest.approx(np.mean([np.mean(o) for o in outcomes if o]))
    assert evaluation.scores.overall["each,none"].stderr is None  # lm-eval: "N/A" for a !function aggregation
    assert evaluation.scores.overall["all,none"].value == pytest.approx(np.mean([all(o) for o in outcomes]))
    seen = config.metric_list[1].aggregation.function.__globals__["SEEN"]["items"]
    assert seen[0] == [[float(x) for x in o] for o in outcomes]  # in document order, each of its own length
    odd = [o for row, o in zip(LIST_ROWS, outcomes) if row["kind"] == "b"]
    flat_b = [x for o in odd for x in o]
    assert evaluation.scores.by_category["b"]["each,none"].value == pytest.approx(sum(flat_b) / len(flat_b))
    assert json.loads(json.dumps(column[1].tolist())) == [1.0, 1.0]  # a log sample's value


@pytest.mark.parametrize("aggregation", ["mean", "median", "perplexity"])
def test_a_list_value_for_an_aggregation_that_is_not_a_function_names_the_file_task_document_and_metric(
        tmp_path, aggregation):
    prepared = prepare_task(write_list_task(tmp_path, aggregation=aggregation), data_dir=tmp_path)
    with pytest.raises(DocumentError, match=rf"task.yaml: task 'ifeval_mini', document 0: process_results "
                                            rf"\(!function utils.checks\) returned a list \(\[True\]\) for metric 'each', "
                                            rf"whose aggregation is '{aggregation}'.*aggregation: !function"):
        evaluate_task(prepared, Answers(GOOD))


@pytest.mark.parametrize("function, found", [("text_in_list", r"'yes' \(str\)"), ("nan_in_list", r"nan \(float\)")])
def test_a_list_holding_anything_but_finite_numbers_is_refused(tmp_path, function, found):
    prepared = prepare_task(write_list_task(tmp_path, function=function), data_dir=tmp_path)
    with pytest.raises(DocumentError, match=rf"task.yaml: task 'ifeval_mini', document 0: process_results "
                                            rf"\(!function utils.{function}\) returned {found} in the list for metric "
                                            r"'each'; a list value holds finite numbers"):
        evaluate_task(prepared, Answers(GOOD))


def test_a_list_on_some_documents_and_a_number_on_others_is_refused(tmp_path):
    prepared = prepare_task(write_list_task(tmp_path, function="mixed"), data_dir=tmp_path)
    with pytest.raises(DocumentError, match=r"task.yaml: task 'ifeval_mini', document 1: metric 'each,none' is a "
                                            r"number there but a list on document 0"):
        evaluate_task(prepared, Answers(GOOD))


def list_record_text(tmp_path, answers, tolerance=Tolerance()):
    prepared = prepare_task(write_list_task(tmp_path), data_dir=tmp_path)
    evaluation = evaluate_task(prepared, Answers(answers))
    record = record_from_evaluation(evaluation, suite="s", baseline_name="default", provenance=provenance(),
                                    tolerance=tolerance)
    return prepared, evaluation, dumps(record)


def test_list_values_are_stored_per_document_and_round_trip_with_their_lengths(tmp_path):
    from pytest_modelbench.gate.baseline_file import parse

    _, evaluation, text = list_record_text(tmp_path, GOOD)
    document = json.loads(text)
    assert document["metrics"]["each,none"] == {"direction": "higher", "ideal": None, "binary": False,
                                                "aggregate": True, "lists": True}
    assert "lists" not in document["metrics"]["all,none"]
    rows = list(document["documents"]["rows"].values())
    assert [row[3] for row in rows] == [[float(x) for x in o] for o in expected_outcomes(GOOD)]
    assert '": [3, "b", 1.0, []],\n' in text  # one line per row; document 3 checks nothing: its list is empty
    record = parse(text, "ifeval_mini.json")
    column = record.values["each,none"]
    assert column.dtype == object and len(column) == 16
    assert [v.tolist() for v in column] == [v.tolist() for v in evaluation.scores.per_document["each,none"]]
    assert {len(v) for v in column} == {0, 1, 2, 3}
    assert record.metric("each,none").lists and not record.metric("all,none").lists
    assert dumps(record) == text  # parse and dump again: the same bytes


@pytest.mark.parametrize("edit, problem", [
    (lambda row, doc: row.__setitem__(3, 1.0), r"'each,none' must be a list of numbers"),
    (lambda row, doc: row.__setitem__(3, [1.0, "yes"]), r"documents.rows.\w+.each,none' must be a number or null"),
    (lambda row, doc: row.__setitem__(3, [None]), r"'each,none' must be a list of numbers"),
    (lambda row, doc: doc["metrics"]["each,none"].pop("aggregate"), r"key 'metrics.each,none': a metric with lists "
                                                                    r"needs an aggregate"),
    (lambda row, doc: doc["metrics"]["each,none"].__setitem__("lists", "yes"), r"key 'metrics.each,none' has a bad "
                                                                               r"flag"),
])
def test_a_damaged_list_cell_is_refused_naming_the_file(tmp_path, edit, problem):
    from pytest_modelbench.errors import BaselineError
    from pytest_modelbench.gate.baseline_file import checksum, parse

    _, _, text = list_record_text(tmp_path, GOOD)
    document = json.loads(text)
    edit(next(iter(document["documents"]["rows"].values())), document)
    document["checksum"] = checksum(document)
    with pytest.raises(BaselineError, match=rf"ifeval_mini.json: invalid baseline: .*{problem}"):
        parse(json.dumps(document), "ifeval_mini.json")


def test_the_gate_reapplies_the_function_to_resampled_documents_lists(tmp_path):
    tolerance = Tolerance(absolute_margin=0.01, alpha=0.05)
    prepared, evaluation, good = list_record_text(tmp_path, GOOD, tolerance)
    _, _, bad = list_record_text(tmp_path, BAD, tolerance)
    aggregates = {m.name: m.aggregate for m in evaluation.scores.metrics if m.aggregate is not None}
    same = gate_texts(good, good, prepared.documents, aggregates).comparison
    assert {e.verdict for e in same.entries} == {Verdict.PASS}
    worse = gate_texts(bad, good, prepared.documents, aggregates).comparison
    each = {e.category: e for e in worse.entries if e.metric == "each,none"}
    flat = lambda answers, kind=None: [x for row, o in zip(LIST_ROWS, expected_outcomes(answers))  # noqa: E731
                                       if kind in (None, row["kind"]) for x in o]
    for category in (None, "a", "b"):
        entry = each[category]
        assert entry.test == "bootstrap" and entry.standard_error > 0
        assert entry.baseline == pytest.approx(np.mean(flat(GOOD, category)))
        assert entry.candidate == pytest.approx(np.mean(flat(BAD, category)))
    assert each[None].verdict is Verdict.REGRESSED


def test_the_paired_bootstrap_indexes_object_columns_of_equal_length_lists_by_document():
    """Every document with two values: an object column must stay one entry per document when resampled (a 2-D array
    would index by value pairs only by luck)."""
    from pytest_modelbench.gate.evidence.paired_tests import aggregate_test
    from pytest_modelbench.metrics.aggregate import DocumentItems, document_column
    from pytest_modelbench.metrics.task_aggregation import TaskAggregation

    class Doc:
        def __init__(self, doc_id):
            self.doc_id = doc_id

    documents = [Doc(i) for i in range(6)]
    seen = []

    def first_items(items):
        seen.append(items)
        return float(np.mean([document[0] for document in items]))

    first_items.dotted_name = "utils.first_items"
    aggregate = TaskAggregation("each", first_items)
    base = {"each": document_column("each", [DocumentItems((1.0, 0.0))] * 6, documents)}
    cand = {"each": document_column("each", [DocumentItems((float(i % 2), 1.0)) for i in range(6)], documents)}
    assert base["each"].shape == (6,)
    base_value, cand_value, test = aggregate_test(aggregate, base, cand, documents, direction="higher", ideal=None,
                                                  seed=1, n_resamples=50)
    assert (base_value, cand_value) == (1.0, 0.5)
    assert test.delta == -0.5 and test.standard_error > 0
    assert all(len(items) == 6 and all(len(document) == 2 for document in items) for items in seen)
    # lists of one length made dense (a group's column of such tasks, metrics/group_scores.py): still one per document
    assert aggregate({"each": np.array([[float(i % 2), 1.0] for i in range(6)])}, documents) == 0.5
    assert seen[-1] == [[float(i % 2), 1.0] for i in range(6)]


def mean_of_flagged(items):
    """A score over the documents flagged 1 (BBQ's per-context scores): NaN without any, as lm-eval's aggregations."""
    flagged = [value for value, flag in items if flag]
    return float(np.mean(flagged)) if flagged else math.nan


mean_of_flagged.dotted_name = "utils.mean_of_flagged"


def flagged_aggregate_test(flagged_clusters, n_clusters=40):
    """aggregate_test over n_clusters clusters of 2 documents; the documents of `flagged_clusters` clusters flagged;
    the candidate worse by 0.2 on every flagged document, with noise."""
    from pytest_modelbench.gate.compare import aggregate_test
    from pytest_modelbench.metrics.aggregate import DocumentItems, document_column
    from pytest_modelbench.metrics.task_aggregation import TaskAggregation

    class Doc:
        def __init__(self, doc_id):
            self.doc_id = doc_id

    documents = [Doc(i) for i in range(2 * n_clusters)]
    clusters = np.repeat(np.arange(n_clusters), 2)
    flags = (clusters < flagged_clusters).astype(float)
    rng = np.random.default_rng(3)
    base = rng.uniform(0.4, 0.8, len(documents))
    cand = base - 0.2 + rng.normal(0, 0.05, len(documents))
    columns = [{"each": document_column("each", [DocumentItems((v, f)) for v, f in zip(values, flags)], documents)}
               for values in (base, cand)]
    return aggregate_test(TaskAggregation("each", mean_of_flagged), *columns, documents, direction="higher",
                          ideal=None, seed=2, clusters=clusters)


def test_a_resample_where_the_aggregation_is_undefined_is_skipped():
    """BBQ's accuracy_amb has no value on a resample without an ambiguous context; such a resample failed the item.
    With the flagged documents in 4 of 40 clusters, about (36/40)^40 = 1.5% of the resamples have none."""
    base_value, cand_value, test = flagged_aggregate_test(flagged_clusters=4)
    assert test.test == "bootstrap" and test.standard_error > 0 and test.df == 39
    assert cand_value - base_value == pytest.approx(test.delta) and test.delta < -0.1


def test_an_aggregation_undefined_on_many_resamples_gets_no_test():
    """Flagged documents in one cluster of 40: (39/40)^40 = 36% of the resamples have none, and those that have
    some see only that cluster: no standard error can be had, so no test (as a category of one cluster)."""
    _, _, test = flagged_aggregate_test(flagged_clusters=1)
    assert test.test == "none" and test.p_values(0.01) == (1.0, 1.0)


def test_an_aggregation_undefined_on_the_whole_task_names_the_metric_and_function():
    from pytest_modelbench.errors import UndefinedAggregateError
    from pytest_modelbench.metrics.task_aggregation import TaskAggregation

    with pytest.raises(UndefinedAggregateError, match=r"metric 'each': aggregation !function utils.mean_of_flagged "
                                                      r"is undefined on these 2 documents \(it returned NaN"):
        TaskAggregation("each", mean_of_flagged)({"each": np.array([[0.5, 0.0], [0.7, 0.0]])}, [])


def test_the_most_changed_documents_show_list_values_even_of_another_length(tmp_path):
    from dataclasses import replace

    from pytest_modelbench.gate.baseline_file import parse
    from pytest_modelbench.gate.changed_documents import most_changed

    prepared, _, text = list_record_text(tmp_path, GOOD)
    baseline = parse(text, "b.json")
    column = baseline.values["each,none"].copy()
    column[1] = np.array([0.0, 0.0, 0.0])  # document 1 checks two words; here three (no broadcasting), all failed
    column[4] = np.array([0.0, 1.0])
    candidate = replace(baseline, values={**baseline.values, "each,none": column})
    changed = {row["doc_id"]: row["changes"] for row in most_changed(baseline, candidate, prepared.documents)}
    assert changed[1]["each,none"] == {"baseline": [1.0, 1.0], "candidate": [0.0, 0.0, 0.0], "flipped": False}
    assert changed[4]["each,none"] == {"baseline": [1.0, 1.0], "candidate": [0.0, 1.0], "flipped": False}
