"""generate_until bleu, chrf and ter against lm-eval 0.4.13's own aggregations (sacrebleu 2.6.0) on fixed references
and answers: tests/reference/aggregations_from_lmeval.json, written by
tests/reference/make_lmeval_metric_reference.py in a scratch venv with lm-eval installed. Also: their YAML keys, the baseline's per-document statistics, and the gate's
paired bootstrap over the corpus score."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.errors import BaselineError, MetricError, TaskConfigError
from pytest_modelbench.run.evaluation import TaskEvaluation
from pytest_modelbench.gate.baseline import Tolerance, record_from_evaluation
from pytest_modelbench.gate.baseline_file import checksum, dumps, parse
from pytest_modelbench.gate.changed_documents import most_changed
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.metrics.aggregate import score_task
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.outputs.results import RESULTS_SCHEMA, results_document, task_results
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.identity import TaskId
from pytest_modelbench.tasks.requests import DocumentRequests
from pytest_modelbench.tasks.task import PreparedTask
from tests.fixtures.gate_records import provenance

RUN_CONFIG = {"model": None, "model_args": None, "dtype": None, "batch_size": 1, "device": None, "limit": None,
              "num_fewshot": None, "shared_prefixes": False}
ORACLE = json.loads((Path(__file__).parents[1] / "reference" / "aggregations_from_lmeval.json").read_text())[
    "corpus"]

TASK = """
task: translate
dataset_path: json
output_type: generate_until
test_split: test
doc_to_text: "Translate: {{source}}"
doc_to_target: "{{target}}"
"""


def write_task(tmp_path, metric_list):
    path = tmp_path / "translate.yaml"
    path.write_text(textwrap.dedent(TASK) + "metric_list:\n" + textwrap.indent(textwrap.dedent(metric_list), "  "))
    return path


@pytest.fixture
def config(tmp_path):
    # as lm-eval's afrobench/flores YAMLs write them (aggregation named), and iwslt2017 (aggregation omitted)
    return load_task_config(write_task(tmp_path, """\
        - metric: bleu
          aggregation: bleu
          higher_is_better: true
        - metric: chrf
        - metric: ter
          aggregation: ter
          higher_is_better: false
        """))


def evaluation(config, references, answers):
    documents = [DocumentRequests(i, f"Translate: {i}", (), (), reference, None, {})
                 for i, reference in enumerate(references)]
    prepared = PreparedTask(config, documents, 0, None, "data1")
    per_document = [{"none": answer} for answer in answers]
    scores = score_task(prepared, resolve_metrics(config), per_document)
    return TaskEvaluation(prepared, [[] for _ in documents], scores, list(answers), per_document)


@pytest.mark.parametrize("corpus", sorted(ORACLE))
def test_corpus_scores_match_lm_eval(config, corpus):
    expected = ORACLE[corpus]
    scores = evaluation(config, expected["references"], expected["predictions"]).scores
    for metric in ("bleu", "chrf", "ter"):
        assert scores.overall[f"{metric},none"].value == pytest.approx(expected[metric], abs=1e-9), metric
        assert scores.overall[f"{metric},none"].stderr is None


def test_directions_and_keys(config):
    metrics = {metric.name: metric for metric in resolve_metrics(config)}
    assert list(metrics) == ["bleu,none", "chrf,none", "ter,none"]
    assert [metrics[name].direction.kind for name in metrics] == ["higher", "higher", "lower"]
    assert [spec.aggregation for spec in config.metric_list] == ["bleu", "chrf", "ter"]


def test_several_references_are_refused_naming_the_document(config):
    with pytest.raises(MetricError, match=re.escape("task 'translate', document 1: metric 'bleu' needs one reference "
                                                    "text per document, found 2")):
        evaluation(config, ["a cat", ("a dog", "one dog")], ["a cat", "a dog"])


@pytest.mark.parametrize("metric_list, message", [
    ("- metric: bleu\n  aggregation: mean\n", "key 'metric_list[0].aggregation': only 'bleu' is supported, got 'mean'"),
    ("- metric: f1\n", "metric 'f1' is a multiple_choice metric in lm-eval"),
    ("- metric: f1\n  hf_evaluate: true\n  average: micro\n", "'metric_list[0].hf_evaluate': metrics of the Hugging "
                                                             "Face evaluate library are not supported (metric 'f1')"),
    ("- metric: chrf\n  word_order: 2\n", "key 'metric_list[0].word_order' is not an option of chrf"),
    ("- metric: rouge\n", "unknown metric 'rouge' in metric_list for a generate_until task (known: exact_match, bleu"),
])
def test_refused_metric_lists_are_named(tmp_path, metric_list, message):
    with pytest.raises(TaskConfigError, match=re.escape(message)):
        resolve_metrics(load_task_config(write_task(tmp_path, metric_list)))


def test_baseline_stores_sentence_statistics_and_the_gate_bootstraps_the_corpus_score(config):
    corpus = ORACLE["translations"]
    references = corpus["references"] * 6
    good = corpus["predictions"] * 6
    worse = [" ".join(answer.split()[:2]) for answer in good]  # the first two words of each answer

    def record(answers):
        return record_from_evaluation(evaluation(config, references, answers), suite="mt", baseline_name="default",
                                      provenance=provenance(), tolerance=Tolerance())

    text = dumps(record(good))
    rows = [line for line in text.splitlines() if re.fullmatch(r'\s+"[0-9a-f]{16}(#\d+)?": \[\d+, \[.*\]\],?', line)]
    assert len(rows) == 48  # one line per document, its statistics inline
    stored = parse(text, "translate.json")
    assert stored.values["bleu,none"].shape == (48, 10)  # lengths, 4 n-gram matches, 4 n-gram totals
    assert stored.overall["bleu,none"].value == pytest.approx(corpus["bleu"], abs=1e-9)
    documents = evaluation(config, references, good).prepared.documents
    same = compare(stored, record(good), Tolerance(), documents)
    assert {entry.verdict for entry in same.entries} == {Verdict.PASS}

    comparison = compare(stored, record(worse), Tolerance(), documents)
    by_metric = {entry.metric: entry for entry in comparison.entries}
    assert {entry.test for entry in comparison.entries} == {"bootstrap"}
    assert all(entry.verdict is Verdict.REGRESSED for entry in comparison.entries)
    ter = by_metric["ter,none"]
    assert ter.candidate > ter.baseline  # lower is better: the delta is oriented
    assert ter.delta == pytest.approx(ter.baseline - ter.candidate)
    moved = most_changed(stored, record(worse), documents)[0]["changes"]["bleu,none"]
    assert len(moved["baseline"]) == len(moved["candidate"]) == 10 and moved["baseline"] != moved["candidate"]


def test_log_samples_hold_the_statistics_and_the_results_json_stays_valid(config):
    import jsonschema

    corpus = ORACLE["first_three"]
    scored = evaluation(config, corpus["references"], corpus["predictions"])
    document = results_document([task_results(TaskId("mt", "translate"), scored, log_samples=True)], RUN_CONFIG, {})
    jsonschema.validate(document, json.loads(RESULTS_SCHEMA.read_text()))
    assert document["tasks"] == {"mt/translate": {"suite": "mt", "task": "translate"}}
    assert document["results"]["mt/translate"]["ter,none"] == pytest.approx(corpus["ter"], abs=1e-9)
    assert len(document["samples"]["mt/translate"][0]["metrics"]["chrf,none"]) == 18  # 6 character orders x 3 counts


def test_baseline_with_statistics_of_different_lengths_is_refused(config):
    corpus = ORACLE["first_three"]
    text = dumps(record_from_evaluation(evaluation(config, corpus["references"], corpus["predictions"]), suite="mt",
                                        baseline_name="default", provenance=provenance(), tolerance=Tolerance()))
    document = json.loads(text)
    first = next(iter(document["documents"]["rows"]))
    document["documents"]["rows"][first][1] = document["documents"]["rows"][first][1][:-1]
    document["checksum"] = checksum(document)
    with pytest.raises(BaselineError, match="values of 'bleu,none' differ in shape"):
        parse(json.dumps(document), "translate.json")
