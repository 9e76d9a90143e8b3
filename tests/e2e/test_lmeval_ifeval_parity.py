"""process_results list values (IFEval's inst_level_*) parity with lm-evaluation-harness 0.4.13.

Oracle: tests/reference/lmeval_process_results_ifeval_like.json, written by lm-eval 0.4.13 itself (HF backend,
SmolLM2-135M-Instruct GGUF dequantized to float32, batch size 1, CPU) running the IFEval-like folder
tests/fixtures/ifeval_like with only its data location made absolute (tests/reference/make_lmeval_ifeval_reference.py).
The folder is lm-eval's tasks/ifeval layout: generate_until, `process_results: !function utils.process_results`
returning a bool per prompt and a list of bools per instruction (strict and loose), the inst_level metrics
aggregated by `!function utils.agg_inst_level_acc` (flattens the lists), the prompt_level ones by mean; utils.py is
ours. Here the same folder is collected with --allow-task-code. The checks that need no model: the prompts, lm-eval's
aggregation over lm-eval's own per-document values, and process_results on lm-eval's generations. The slow one
generates with the default model and compares everything again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.metrics.aggregate import DocumentItems, document_column
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.lmeval_references import load_reference

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "ifeval_like"
PROMPT_LEVEL = ("prompt_level_strict_acc", "prompt_level_loose_acc")
INST_LEVEL = ("inst_level_strict_acc", "inst_level_loose_acc")


@pytest.fixture(scope="module")
def reference_run():
    reference = load_reference("lmeval_process_results_ifeval_like.json")
    for split, digest in reference["provenance"]["data_sha256"].items():
        assert hashlib.sha256((FOLDER / f"{split}.jsonl").read_bytes()).hexdigest() == digest, split
    assert (FOLDER / "utils.py").read_text(encoding="utf-8") == reference["utils_py"]
    config = load_task_config(FOLDER / "ifeval_like.yaml", allow_task_code=True)
    return reference, prepare_task(config, data_dir=FOLDER)


class Generations:
    """A backend that answers with the given generations, in document order."""

    def __init__(self, generations):
        self.generations = list(generations)

    def generate_task(self, prepared):
        return list(self.generations)


def assert_matches_lm_eval(evaluation, reference):
    samples = reference["samples"]
    assert evaluation.answers == [{"none": s["filtered"]} for s in samples]
    assert [m.name for m in evaluation.scores.metrics] == [
        "prompt_level_strict_acc,none", "inst_level_strict_acc,none", "prompt_level_loose_acc,none",
        "inst_level_loose_acc,none"]
    for metric in PROMPT_LEVEL:
        assert list(evaluation.scores.per_document[f"{metric},none"]) == [float(s["metrics"][metric]) for s in samples]
    for metric in INST_LEVEL:  # each document's list, of its own length
        ours = [values.tolist() for values in evaluation.scores.per_document[f"{metric},none"]]
        assert ours == [[float(v) for v in s["metrics"][metric]] for s in samples], metric
    for key, value in reference["results"].items():
        metric, pipeline = key.split(",", 1)
        ours = evaluation.scores.overall[f"{metric.removesuffix('_stderr')},{pipeline}"]
        if metric.endswith("_stderr"):
            assert ours.stderr == (None if value == "N/A" else pytest.approx(value, abs=1e-12)), key
        else:
            assert ours.value == pytest.approx(value, abs=1e-12), key


def test_the_reference_exercises_ragged_lists_and_both_variants(reference_run):
    reference, _ = reference_run
    samples = reference["samples"]
    assert len(samples) == 10
    strict = [s["metrics"]["inst_level_strict_acc"] for s in samples]
    assert all(isinstance(v, bool) for values in strict for v in values)  # lm-eval's values: lists of bools
    assert {len(values) for values in strict} == {1, 2, 3}
    assert strict != [s["metrics"]["inst_level_loose_acc"] for s in samples]
    flat = [v for values in strict for v in values]
    assert 0 < sum(flat) < len(flat)
    # the flattened share differs from the mean of per-document shares: the aggregation saw the lists as they are
    assert reference["results"]["inst_level_strict_acc,none"] != pytest.approx(np.mean([np.mean(v) for v in strict]))
    assert reference["results"]["inst_level_strict_acc_stderr,none"] == "N/A"


def test_prompts_and_generation_settings_match_lm_eval(reference_run):
    reference, prepared = reference_run
    assert [doc.context for doc in prepared.documents] == [s["context"] for s in reference["samples"]]
    settings = prepared.config.generation
    for sample in reference["samples"]:
        assert list(settings.until) == sample["gen_kwargs"]["until"] == []
        assert settings.max_gen_toks == sample["gen_kwargs"]["max_gen_toks"] == 24


def test_our_aggregation_of_lm_evals_per_document_values_is_lm_evals_aggregate(reference_run):
    """The task's own `!function` over lm-eval's logged lists (and the mean over its bools), as the engine and the
    gate apply it, gives lm-eval's aggregate to float noise."""
    reference, prepared = reference_run
    samples, documents = reference["samples"], prepared.documents
    metrics = {m.name: m for m in resolve_metrics(prepared.config)}
    for metric in INST_LEVEL:
        key = f"{metric},none"
        column = document_column(key, [DocumentItems(s["metrics"][metric]) for s in samples], documents)
        value = metrics[key].aggregate({key: column}, documents)
        assert value == pytest.approx(reference["results"][key], abs=1e-12), key
    for metric in PROMPT_LEVEL:
        key = f"{metric},none"
        assert metrics[key].aggregate is None  # the mean, with lm-eval's stderr
        values = np.array([float(s["metrics"][metric]) for s in samples])
        assert float(np.mean(values)) == pytest.approx(reference["results"][key], abs=1e-12), key
        assert float(np.std(values, ddof=1) / np.sqrt(len(values))) == pytest.approx(
            reference["results"][f"{metric}_stderr,none"], abs=1e-12), key


def test_process_results_on_lm_evals_generations_match_lm_eval(reference_run):
    reference, prepared = reference_run
    evaluation = evaluate_task(prepared, Generations(s["generation"] for s in reference["samples"]))
    assert_matches_lm_eval(evaluation, reference)


@pytest.mark.slow
def test_generations_per_document_values_and_aggregates_match_lm_eval(reference_run, default_model):
    reference, prepared = reference_run
    evaluation = evaluate_task(prepared, CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1))
    assert evaluation.generations == [s["generation"] for s in reference["samples"]]
    assert_matches_lm_eval(evaluation, reference)
