"""`metric: !function module.fn` on generate_until tasks under --allow-task-code, with lm-eval 0.4.13's contract
(api/task.py ConfigurableTask.__init__ and process_results): named by the function's __name__; per document and
filter pipeline fn(references=[gold], predictions=[answer], **options), else on TypeError fn([gold, answer]); several
references scored one by one (1.0 if any); its aggregation and direction from the entry; its per-document values
gated like any metric's."""

from __future__ import annotations

import importlib.util
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.errors import DocumentError, TaskConfigError
from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.gate.baseline import Tolerance, record_from_evaluation
from pytest_modelbench.gate.baseline_file import dumps
from pytest_modelbench.gate.settings import resolve_tolerance
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.gate.judge import gate_texts
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.gate_records import provenance

UTILS = '''
import json
import pathlib

LOG = pathlib.Path(__file__).with_name("calls.jsonl")

def log(*entry):
    with LOG.open("a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\\n")

def overlap(predictions, references, scale=1.0):  # lm-eval passes them by name
    log("overlap", references, predictions, scale)
    ref, pred = set(references[0].split()), set(predictions[0].split())
    return scale * len(ref & pred) / len(ref | pred)

def one_item(items):
    log("one_item", items)
    reference, prediction = items
    return float(len(prediction)) - len(reference)

def as_dict(references, predictions):
    return {"as_dict": float(references[0] in predictions[0])}

alias = as_dict

def other_keys(references, predictions):
    return {"precision": 1.0, "recall": 0.0}

def with_extra(references, predictions):
    return {"with_extra": 1.0, "extra": 2.0}

def text(references, predictions):
    return "good"

def passthrough(items):
    return items

def nan(references, predictions):
    return float("nan")

def raises(references, predictions):
    raise ZeroDivisionError("no words")

def imports_lm_eval(references, predictions):
    import lm_eval.api.metrics
    return 1.0

def contains(references, predictions):
    log("contains", references, predictions)
    return float(references[0] in predictions[0])

def exact_match(references, predictions):
    log("exact_match", references, predictions)
    return {"exact_match": float(any(r == p for r, p in zip(references, predictions)))}

def largest(values):
    return max(values)

def bleu(references, predictions):
    return 1.0
'''
ROWS = [{"question": f"Question {i}?", "answer": f"the answer {i}", "names": [f"n{i}", f"alt{i}"],
         "choices": ["red", "green", "blue"], "label": i % 3} for i in range(6)]


def write_task(tmp_path: Path, metric_list: str, *, target: str = "answer", extra: str = "",
               output_type: str = "generate_until") -> Path:
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (tmp_path / "task.yaml").write_text(textwrap.dedent(f"""
        task: fn_metrics
        dataset_path: json
        dataset_kwargs:
          data_files: {{test: test.jsonl}}
        test_split: test
        output_type: {output_type}
        doc_to_text: "{{{{question}}}}"
        doc_to_target: {target}
        """) + textwrap.dedent(extra) + "metric_list:\n" + textwrap.indent(textwrap.dedent(metric_list), "  "),
        encoding="utf-8")
    return tmp_path / "task.yaml"


class Answers:
    """A backend whose generation for document i is answers[i]."""

    def __init__(self, answers):
        self.answers = answers

    def generate_task(self, prepared):
        return [self.answers[doc.doc_id] for doc in prepared.documents]


GENERATIONS = [f"the answer {i}" if i % 2 else f" maybe answer {i}!" for i in range(6)]


def evaluate(path: Path, generations=GENERATIONS):
    config = load_task_config(path, allow_task_code=True)
    return evaluate_task(prepare_task(config, data_dir=path.parent), Answers(generations))


def calls(tmp_path: Path) -> list:
    log = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


def jaccard(a: str, b: str) -> float:
    a, b = set(a.split()), set(b.split())
    return len(a & b) / len(a | b)


def test_called_per_document_and_pipeline_with_references_predictions_and_the_options(tmp_path):
    evaluation = evaluate(write_task(tmp_path, """
        - metric: !function utils.overlap
          aggregation: mean
          higher_is_better: true
          scale: 2.0
        """, extra="""
        filter_list:
          - name: whole
            filter: [{function: take_first}]
          - name: stripped
            filter: [{function: remove_whitespace}, {function: take_first}]
        """))
    assert [m.name for m in evaluation.scores.metrics] == ["overlap,whole", "overlap,stripped"]
    logged = calls(tmp_path)
    assert logged[:6] == [["overlap", [f"the answer {i}"], [GENERATIONS[i]], 2.0] for i in range(6)]
    assert logged[6:] == [["overlap", [f"the answer {i}"], [GENERATIONS[i].strip()], 2.0] for i in range(6)]
    expected = [2.0 * jaccard(f"the answer {i}", GENERATIONS[i]) for i in range(6)]
    assert len(set(expected)) > 1
    np.testing.assert_allclose(evaluation.scores.per_document["overlap,whole"], expected, rtol=1e-12)
    overall = evaluation.scores.overall["overlap,whole"]
    assert overall.value == pytest.approx(np.mean(expected), rel=1e-12)
    assert overall.stderr == pytest.approx(np.std(expected, ddof=1) / math.sqrt(6), rel=1e-12)
    assert evaluation.scores.metrics[0].direction.kind == "higher"


def test_an_ideal_point_directs_a_function_metric_on_every_pipeline(tmp_path):
    path = write_task(tmp_path, """
        - metric: !function utils.overlap
          aggregation: mean
          higher_is_better: false
        """, extra="modelbench:\n  gate:\n    metrics:\n      overlap: {ideal: 0.5}\n")
    [metric] = resolve_metrics(load_task_config(path, allow_task_code=True))
    assert metric.name == "overlap,none" and (metric.direction.kind, metric.direction.ideal) == ("ideal", 0.5)


def test_a_function_that_refuses_the_keywords_gets_one_reference_prediction_item_without_the_options(tmp_path):
    evaluation = evaluate(write_task(tmp_path, """
        - metric: !function utils.one_item
          aggregation: mean
          higher_is_better: false
          scale: 3.0
        """))
    assert calls(tmp_path) == [["one_item", [f"the answer {i}", GENERATIONS[i]]] for i in range(6)]
    np.testing.assert_array_equal(evaluation.scores.per_document["one_item,none"],
                                  [len(GENERATIONS[i]) - len(f"the answer {i}") for i in range(6)])
    assert evaluation.scores.metrics[0].direction.kind == "lower"


def test_the_metric_is_named_by_the_functions_name_and_a_dict_of_that_name_is_its_value(tmp_path):
    path = write_task(tmp_path, """
        - metric: !function utils.alias
          aggregation: mean
          higher_is_better: true
        """, extra="modelbench:\n  gate:\n    metrics:\n      as_dict: {absolute_margin: 0.05}\n")
    evaluation = evaluate(path)
    np.testing.assert_array_equal(evaluation.scores.per_document["as_dict,none"], [0, 1, 0, 1, 0, 1])
    config = load_task_config(path, allow_task_code=True)
    assert resolve_tolerance(config, {}, resolve_metrics(config)).margin("as_dict,none").absolute == 0.05


def test_several_references_are_scored_one_by_one_and_exact_match_gets_them_together(tmp_path):
    path = write_task(tmp_path, """
        - metric: !function utils.contains
          aggregation: mean
          higher_is_better: true
        - metric: !function utils.exact_match
        """, target="names")
    evaluation = evaluate(path, [f"alt{i}" if i % 2 else "nothing" for i in range(6)])
    logged = calls(tmp_path)
    assert logged[:2] == [["contains", ["n0"], ["nothing"]], ["contains", ["alt0"], ["nothing"]]]
    assert ["exact_match", ["n1", "alt1"], ["alt1", "alt1"]] in logged  # lm-eval's exact_match branch
    np.testing.assert_array_equal(evaluation.scores.per_document["contains,none"], [0, 1] * 3)
    np.testing.assert_array_equal(evaluation.scores.per_document["exact_match,none"], [0, 1] * 3)
    metrics = {m.name: m for m in evaluation.scores.metrics}
    assert metrics["exact_match,none"].direction.kind == "higher"  # lm-eval's registered defaults for the name
    assert metrics["exact_match,none"].aggregate is None  # mean


def test_with_doc_to_choice_the_reference_is_the_chosen_text(tmp_path):
    evaluate(write_task(tmp_path, """
        - metric: !function utils.contains
          aggregation: mean
          higher_is_better: true
        """, target="label", extra="doc_to_choice: choices\n"), ["green"] * 6)
    assert [entry[1] for entry in calls(tmp_path)] == [[["red", "green", "blue"][i % 3]] for i in range(6)]


@pytest.mark.parametrize("aggregation, expected", [
    ("median", lambda v: float(sorted(v)[len(v) // 2])),  # lm-eval 0.4.13 api/metrics.py median
    ("perplexity", lambda v: math.exp(-np.mean(v))),
    ("!function utils.largest", max),
])
def test_other_aggregations(tmp_path, aggregation, expected):
    evaluation = evaluate(write_task(tmp_path, f"""
        - metric: !function utils.one_item
          aggregation: {aggregation}
          higher_is_better: false
        """))
    values = [len(GENERATIONS[i]) - len(f"the answer {i}") for i in range(6)]
    assert evaluation.scores.overall["one_item,none"].value == pytest.approx(expected(values), rel=1e-12)
    assert evaluation.scores.overall["one_item,none"].stderr is None
    margin = evaluation.scores.metrics[0].margin
    assert (margin.relative, margin.absolute) == ((0.02, 0.0) if aggregation == "perplexity" else (0.0, 0.01))


@pytest.mark.parametrize("function, message", [
    ("other_keys", r"metric 'other_keys' \(!function utils.other_keys\) returned the metrics \['precision', "
                   r"'recall'\]; only a value of its own metric 'other_keys' is supported"),
    ("with_extra", r"metric 'with_extra' \(!function utils.with_extra\) returned the metrics \['extra', "
                   r"'with_extra'\]; only a value of its own metric 'with_extra' is supported"),
    ("text", r"metric 'text' \(!function utils.text\) returned str 'good', not a number"),
    ("passthrough", r"metric 'passthrough' \(!function utils.passthrough\) returned list \['the answer 0', ' maybe "
                    r"answer 0!'\], not a number \(per-document items for a !function aggregation, lm-eval's "
                    r"passthrough metrics, are not supported yet\)"),
    ("nan", r"metric 'nan' \(!function utils.nan\) returned nan; a metric value must be a finite number"),
    ("raises", r"metric 'raises' \(!function utils.raises\): raised ZeroDivisionError: no words"),
    ("imports_lm_eval", r"metric 'imports_lm_eval' \(!function utils.imports_lm_eval\): it imports module "
                        r"'lm_eval.*pytest-modelbench\[lmeval-task-code\]"),
])
def test_a_bad_value_names_the_file_document_filter_and_metric(tmp_path, function, message):
    if function == "imports_lm_eval" and importlib.util.find_spec("lm_eval") is not None:
        pytest.skip("lm-eval is installed here, so its import succeeds")
    path = write_task(tmp_path, f"""
        - metric: !function utils.{function}
          aggregation: mean
          higher_is_better: true
        """)
    with pytest.raises(DocumentError, match=r"task.yaml: task 'fn_metrics', document 0, filter 'none': " + message):
        evaluate(path)


METRIC = """
- metric: !function utils.overlap
  aggregation: mean
  higher_is_better: true
"""


@pytest.mark.parametrize("metric_list, extra, output_type, message", [
    (METRIC.replace("  aggregation: mean\n", ""), "", "generate_until",
     r"key 'metric_list\[0\].aggregation' is needed for metric 'overlap' \(!function utils.overlap\): lm-eval 0.4.13 "
     r"has no default aggregation for it; use mean, median, perplexity or a !function"),
    ("- metric: !function utils.bleu\n", "", "generate_until",
     r"key 'metric_list\[0\].aggregation' is needed for metric 'bleu' \(!function utils.bleu\): lm-eval's default for "
     r"that name, 'bleu', does not aggregate one number per document"),
    (METRIC.replace("mean", "bleu"), "", "generate_until",
     r"key 'metric_list\[0\].aggregation': a !function metric may use mean, median, perplexity or a !function, "
     r"got 'bleu'"),
    (METRIC.replace("  higher_is_better: true\n", ""), "", "generate_until",
     r"key 'metric_list\[0\].higher_is_better' is needed: metric 'overlap' \(!function utils.overlap\) is not a "
     r"metric whose direction lm-eval registers"),
    (METRIC.replace("true", "yes please"), "", "generate_until",
     r"key 'metric_list\[0\].higher_is_better' must be true or false"),
    (METRIC, "doc_to_choice: choices\n", "multiple_choice",
     r"key 'metric_list\[0\].metric': lm-eval 0.4.13 calls a '!function' metric only for generate_until tasks"),
    (METRIC, "process_results: !function utils.overlap\n", "generate_until",
     r"key 'metric_list\[0\].metric': a '!function' metric cannot be used with process_results"),
    (METRIC + "- metric: !function utils.overlap\n  aggregation: median\n  higher_is_better: true\n", "",
     "generate_until", r"key 'metric_list': two entries are metric 'overlap'"),
    ("- metric: !function utils.missing\n  aggregation: mean\n  higher_is_better: true\n", "", "generate_until",
     r"key 'metric_list\[0\].metric': cannot load utils.missing"),
])
def test_bad_function_metric_entries_are_collection_errors_naming_file_and_key(tmp_path, metric_list, extra,
                                                                                 output_type, message):
    target = "label" if output_type == "multiple_choice" else "answer"
    path = write_task(tmp_path, metric_list, target=target, extra=extra, output_type=output_type)
    with pytest.raises(TaskConfigError, match=r"task.yaml: " + message):
        resolve_metrics(load_task_config(path, allow_task_code=True))  # what collection runs


def test_a_function_metric_needs_allow_task_code_naming_the_option(tmp_path):
    with pytest.raises(TaskConfigError, match=r"task.yaml: key 'metric_list\[0\].metric' uses '!function "
                                              r"utils.overlap'.*pass --allow-task-code to allow it"):
        load_task_config(write_task(tmp_path, METRIC))


@pytest.mark.parametrize("aggregation", ["mean", "median"])
def test_the_gate_pairs_the_per_document_values_and_a_worse_model_regresses(tmp_path, aggregation):
    rows = [{"question": f"Q{i}?", "answer": f"w{i % 5} x{i % 7} y{i % 3}"} for i in range(60)]
    path = write_task(tmp_path, METRIC.replace("mean", aggregation))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    prepared = prepare_task(load_task_config(path, allow_task_code=True), data_dir=tmp_path)
    good = [row["answer"] if i % 4 else row["answer"].split()[0] for i, row in enumerate(rows)]
    bad = [row["answer"].split()[0] if i % 4 else "none" for i, row in enumerate(rows)]
    tolerance = Tolerance(absolute_margin=0.01, alpha=0.05)

    def gated(candidate, baseline):
        texts = []
        for generations in (candidate, baseline):
            evaluation = evaluate_task(prepared, Answers(generations))
            record = record_from_evaluation(evaluation, suite="s", baseline_name="default", provenance=provenance(),
                                            tolerance=tolerance)
            assert list(record.values["overlap,none"]) == list(evaluation.scores.per_document["overlap,none"])
            texts.append(dumps(record))
        aggregates = {m.name: m.aggregate for m in evaluation.scores.metrics if m.aggregate is not None}
        return gate_texts(texts[0], texts[1], prepared.documents, aggregates).comparison

    assert {e.verdict for e in gated(good, good).entries} == {Verdict.PASS}
    (entry,) = gated(bad, good).entries
    assert entry.metric == "overlap,none" and entry.verdict is Verdict.REGRESSED and entry.test == "bootstrap"
    assert entry.delta < -0.3
