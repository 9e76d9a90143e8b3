"""Multiple-choice f1 and mcc against lm-eval 0.4.13's own aggregations (sklearn 1.9.1) on fixed (gold, prediction)
pairs: tests/reference/aggregations_from_lmeval.json, written by tests/reference/make_lmeval_metric_reference.py in a
scratch venv with lm-eval installed. Also: their YAML keys, and the gate's paired bootstrap over them."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_modelbench.errors import MetricError, TaskConfigError
from pytest_modelbench.gate.baseline import Tolerance, record_from_evaluation
from pytest_modelbench.gate.baseline_file import dumps, parse
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.metrics.classification import aggregate_f1, aggregate_mcc
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.tasks.config import load_task_config
from tests.fixtures.gate_records import fake_evaluation, provenance

ORACLE = json.loads((Path(__file__).parents[1] / "reference" / "aggregations_from_lmeval.json").read_text())[
    "classification"]
AGGREGATES = {"f1": aggregate_f1, "mcc": aggregate_mcc}


@pytest.mark.parametrize("case", sorted(ORACLE))
@pytest.mark.parametrize("metric", ["f1", "mcc"])
def test_matches_lm_eval_or_fails_where_it_fails(case, metric):
    expected = ORACLE[case][metric]
    documents = [SimpleNamespace(doc_id=i, gold=gold) for i, gold in enumerate(ORACLE[case]["golds"])]
    values = {metric: np.array(ORACLE[case]["predictions"], dtype=float)}
    if "error" in expected:
        with pytest.raises(MetricError, match="sklearn refuses"):
            AGGREGATES[metric](values, documents)
    else:
        assert AGGREGATES[metric](values, documents) == pytest.approx(expected["value"], abs=1e-12)


def test_several_golds_are_named():
    documents = [SimpleNamespace(doc_id=0, gold=1), SimpleNamespace(doc_id=7, gold=(0, 2))]
    with pytest.raises(MetricError, match=re.escape("document 7: metric 'mcc' needs one gold choice per document")):
        aggregate_mcc({"mcc": np.array([1.0, 0.0])}, documents)


TASK = """
task: cola
dataset_path: json
output_type: multiple_choice
test_split: test
doc_to_text: "{{sentence}}"
doc_to_target: label
doc_to_choice: ["no", "yes"]
"""


def task_with_metrics(tmp_path, metric_list):
    path = tmp_path / "cola.yaml"
    path.write_text(textwrap.dedent(TASK) + "metric_list:\n" + textwrap.indent(textwrap.dedent(metric_list), "  "))
    return path


def test_yaml_keys_as_lm_eval_writes_them(tmp_path):
    # catalan_bench/catcola.yaml (aggregation omitted: lm-eval's registry default) and evalita's f1 (average ignored
    # by lm-eval's multiple-choice path).
    config = load_task_config(task_with_metrics(tmp_path, """\
        - metric: mcc
        - metric: f1
          aggregation: f1
          higher_is_better: true
          average: macro
        - metric: acc
        """))
    assert [metric.name for metric in resolve_metrics(config)] == ["mcc", "f1", "acc"]
    assert [spec.aggregation for spec in config.metric_list] == ["matthews_corrcoef", "f1", "mean"]


def test_a_mean_of_f1_pairs_is_refused(tmp_path):
    with pytest.raises(TaskConfigError, match=re.escape("key 'metric_list[0].aggregation': only 'f1' is supported, "
                                                        "got 'mean'")):
        load_task_config(task_with_metrics(tmp_path, "- metric: f1\n  aggregation: mean\n"))


def _predictions(task, wrong_every):
    """60 two-choice documents, gold alternating; the prediction is wrong on every `wrong_every`-th document."""
    docs, lls = [], []
    for i in range(60):
        gold = i % 2
        pred = 1 - gold if i % wrong_every == 0 else gold
        docs.append((f"sentence {i}", ("no", "yes"), gold, None))
        lls.append([-1.0, -2.0] if pred == 0 else [-2.0, -1.0])
    return fake_evaluation(task, docs, lls, ("f1", "mcc", "acc"), category_field=None)


def test_gate_bootstraps_the_aggregates_with_their_documents():
    tolerance = Tolerance()

    def record(evaluation):
        return record_from_evaluation(evaluation, suite="glue", baseline_name="default", provenance=provenance(),
                                      tolerance=tolerance)

    good = _predictions("cola", wrong_every=10)
    stored = parse(dumps(record(good)), "cola.json")  # the predicted indices round-trip; values come from aggregates
    assert stored.overall["mcc"].value == pytest.approx(aggregate_mcc(stored.values, good.prepared.documents))
    same = compare(stored, record(good), tolerance, good.prepared.documents)
    assert {entry.verdict for entry in same.entries} == {Verdict.PASS}

    worse = _predictions("cola", wrong_every=3)
    comparison = compare(stored, record(worse), tolerance, worse.prepared.documents)
    by_metric = {entry.metric: entry for entry in comparison.entries}
    assert by_metric["f1"].test == by_metric["mcc"].test == "bootstrap"
    assert by_metric["f1"].verdict is by_metric["mcc"].verdict is Verdict.REGRESSED
    assert by_metric["mcc"].delta == pytest.approx(by_metric["mcc"].candidate - by_metric["mcc"].baseline)
