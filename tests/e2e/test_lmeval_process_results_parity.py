"""process_results parity with lm-evaluation-harness 0.4.13 on the real default model.

Oracle: tests/reference/lmeval_process_results_truthfulqa_mc2.json, written by lm-eval 0.4.13 itself (HF backend,
SmolLM2-135M-Instruct GGUF dequantized to float32, batch size 1, CPU) running the TruthfulQA-mc2-like folder
tests/fixtures/truthfulqa_mc2 (lm-eval's truthfulqa_mc2 keys, `process_results: !function utils.process_results_mc2`
with a utils.py of ours) on its 12 local documents (tests/reference/make_lmeval_reference.py, run `process_results`).
Here the same folder is collected with --allow-task-code. mc2 per document is a normalised probability mass: with
every log-likelihood within `d` of lm-eval's it moves by at most 2·p(1−p)·d ≤ d/2.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.lmeval_references import aggregate_bounds, load_reference, loglikelihood_mismatches, tolerance_for

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "truthfulqa_mc2"


@pytest.fixture(scope="module")
def reference_run():
    reference = load_reference("lmeval_process_results_truthfulqa_mc2.json")
    data = (FOLDER / "validation.jsonl").read_bytes()
    assert hashlib.sha256(data).hexdigest() == reference["provenance"]["data_sha256"]["validation"]
    config = load_task_config(FOLDER / "truthfulqa_mc2.yaml", allow_task_code=True)
    return reference, prepare_task(config, data_dir=FOLDER)


def test_requests_match_lm_eval(reference_run):
    reference, prepared = reference_run
    assert [[[doc.context, choice] for choice in doc.continuations] for doc in prepared.documents] == \
        [sample["requests"] for sample in reference["samples"]]


@pytest.mark.slow
def test_mc2_per_document_and_its_mean_match_lm_eval(reference_run, default_model):
    reference, prepared = reference_run
    samples = reference["samples"]
    evaluation = evaluate_task(prepared, CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1))
    tolerance = tolerance_for(reference)
    mismatches = loglikelihood_mismatches(evaluation.loglikelihoods, samples, tolerance)
    assert not mismatches, "\n".join(mismatches)
    ours, theirs = list(evaluation.scores.per_document["acc"]), [s["metrics"]["acc"] for s in samples]
    for value, expected, sample in zip(ours, theirs, samples):
        bound = max(tolerance.bound(ll) for ll in sample["loglikelihoods"]) / 2
        assert abs(value - expected) <= bound, f"document {sample['doc_id']}: {value} vs lm-eval {expected}"
    assert len({round(v, 3) for v in theirs}) > 6  # documents differ, so a value paired with another would show
    mean_bound, stderr_bound = aggregate_bounds(ours, theirs)
    overall = evaluation.scores.overall["acc"]
    assert overall.value == pytest.approx(reference["results"]["acc"], abs=mean_bound)
    assert overall.stderr == pytest.approx(reference["results"]["acc_stderr"], abs=stderr_bound)
