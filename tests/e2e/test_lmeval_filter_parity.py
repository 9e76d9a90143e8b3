"""Task-code filters and `metric: !function` parity with lm-evaluation-harness 0.4.13.

Oracle: tests/reference/lmeval_filter_gsm8k_custom_filter.json, written by lm-eval 0.4.13 itself (HF backend,
SmolLM2-135M-Instruct GGUF dequantized to float32, batch size 1, CPU, --limit 10) running the GSM8K-like folder
tests/fixtures/gsm8k_custom_filter with only its data location made absolute
(tests/reference/make_lmeval_filter_reference.py). Its pipelines are a `function: custom` filter_fn, a filter class
(`function: !function utils.FirstNumberFilter` with an argument) and a custom filter_fn returning one string per
document; its metrics exact_match and two `metric: !function` ones (keywords plus an option, returning a dict; one
[reference, prediction] item with a `!function` aggregation). Here the same folder is collected with
--allow-task-code. Two checks need no model: the prompts, and the filters and metrics applied to lm-eval's own
generations. The slow one generates with the default model and compares everything again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.lmeval_references import load_reference

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k_custom_filter"
PIPELINES = ("custom-last-number", "class-first-number", "custom-stripped")
METRICS = ("exact_match", "numeric_match", "length_ratio")


@pytest.fixture(scope="module")
def reference_run():
    reference = load_reference("lmeval_filter_gsm8k_custom_filter.json")
    for split, digest in reference["provenance"]["data_sha256"].items():
        assert hashlib.sha256((FOLDER / f"{split}.jsonl").read_bytes()).hexdigest() == digest, split
    assert (FOLDER / "utils.py").read_text(encoding="utf-8") == reference["utils_py"]
    config = load_task_config(FOLDER / "gsm8k_custom_filter.yaml", allow_task_code=True)
    return reference, prepare_task(config, data_dir=FOLDER)


class Generations:
    """A backend that answers with the given generations, in document order."""

    def __init__(self, generations):
        self.generations = generations

    def generate_task(self, prepared):
        return list(self.generations)


def assert_matches_lm_eval(evaluation, reference):
    samples = reference["samples"]
    assert evaluation.answers == [s["filtered"] for s in samples]
    assert [m.name for m in evaluation.scores.metrics] == [f"{m},{p}" for m in METRICS for p in PIPELINES]
    for metric in METRICS:
        for pipeline in PIPELINES:
            key = f"{metric},{pipeline}"
            assert list(evaluation.scores.per_document[key]) == [s["metrics"][pipeline][metric] for s in samples], key
    for key, value in reference["results"].items():
        metric, pipeline = key.split(",", 1)
        ours = evaluation.scores.overall[f"{metric.removesuffix('_stderr')},{pipeline}"]
        if metric.endswith("_stderr"):
            assert ours.stderr == (None if value == "N/A" else pytest.approx(value, abs=1e-12)), key
        else:
            assert ours.value == pytest.approx(value, abs=1e-12), key


def test_the_reference_exercises_every_pipeline_and_metric(reference_run):
    reference, _ = reference_run
    samples = reference["samples"]
    assert len(samples) == 10
    for pipeline in PIPELINES:  # the documents differ, so an answer paired with another document would show
        assert len({s["filtered"][pipeline] for s in samples}) > 5, pipeline
    last = [s["metrics"]["custom-last-number"] for s in samples]
    assert [m["numeric_match"] for m in last] != [m["exact_match"] for m in last]  # the tolerance option is used
    assert len({m["length_ratio"] for m in last}) > 1


def test_prompts_and_targets_match_lm_eval(reference_run):
    reference, prepared = reference_run
    assert [doc.context for doc in prepared.documents] == [s["context"] for s in reference["samples"]]
    assert [doc.gold for doc in prepared.documents] == [s["target"] for s in reference["samples"]]


def test_filters_and_metrics_on_lm_evals_generations_match_lm_eval(reference_run):
    reference, prepared = reference_run
    evaluation = evaluate_task(prepared, Generations(s["generation"] for s in reference["samples"]))
    assert_matches_lm_eval(evaluation, reference)


@pytest.mark.slow
def test_generations_filtered_answers_and_metrics_match_lm_eval(reference_run, default_model):
    reference, prepared = reference_run
    evaluation = evaluate_task(prepared, CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1))
    assert evaluation.generations == [s["generation"] for s in reference["samples"]]
    assert_matches_lm_eval(evaluation, reference)
