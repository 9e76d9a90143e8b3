"""loglikelihood parity with lm-evaluation-harness 0.4.13 on the real default model.

Oracle: tests/reference/lmeval_loglikelihood_*.json, written by lm-eval 0.4.13 itself (HF backend, SmolLM2-135M-Instruct
GGUF dequantized to float32, batch size 1, CPU) running its lambada_openai YAML on the LAMBADA-like passages of
tests/fixtures/lambada_data.py, 0-shot and 2-shot (tests/reference/make_lmeval_reference.py, run `loglikelihood`).
Here the same YAML reads the same rows through --data-dir. Log-likelihoods are held to lm-eval's within 1e-4 on a CPU
with the reference's kernels and within the measured cross-CPU bound elsewhere (tests/fixtures/lmeval_references.py);
greedy flags, acc and perplexity must be lm-eval's.
"""

from __future__ import annotations

import hashlib
import math

import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.lambada_data import TASK, TASK_YAML, write_lambada_fixture
from tests.fixtures.lmeval_references import (
    REFERENCE_DIR,
    aggregate_bounds,
    load_reference,
    loglikelihood_mismatches,
    tolerance_for,
)

LOGLIKELIHOOD_REFERENCES = sorted(p.name for p in REFERENCE_DIR.glob("lmeval_loglikelihood_*.json"))


@pytest.fixture(params=LOGLIKELIHOOD_REFERENCES,
                ids=lambda name: name.removeprefix("lmeval_loglikelihood_").removesuffix(".json"))
def reference_run(request, tmp_path_factory):
    reference = load_reference(request.param)
    root = tmp_path_factory.mktemp("lambada")
    data = write_lambada_fixture(root)
    assert hashlib.sha256(data.read_bytes()).hexdigest() == reference["provenance"]["data_sha256"]["test"]
    (root / f"{TASK}.yaml").write_text(TASK_YAML, encoding="utf-8")
    provenance = reference["provenance"]
    prepared = prepare_task(load_task_config(root / f"{TASK}.yaml"), data_dir=root,
                            num_fewshot=provenance["num_fewshot"], limit=provenance["limit"])
    return reference, prepared


def test_requests_match_lm_eval(reference_run):
    reference, prepared = reference_run
    assert len(LOGLIKELIHOOD_REFERENCES) == 2
    assert [[[doc.context, *doc.continuations]] for doc in prepared.documents] == \
        [sample["requests"] for sample in reference["samples"]]


@pytest.mark.slow
def test_loglikelihoods_greedy_flags_and_metrics_match_lm_eval(reference_run, default_model):
    reference, prepared = reference_run
    samples = reference["samples"]
    evaluation = evaluate_task(prepared, CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1))
    tolerance = tolerance_for(reference)
    mismatches = loglikelihood_mismatches(evaluation.loglikelihoods, samples, tolerance)
    assert not mismatches, "\n".join(mismatches)
    assert evaluation.greedy == [sample["is_greedy"][0] for sample in samples]
    per_document = evaluation.scores.per_document
    assert list(per_document["acc"]) == [sample["metrics"]["acc"] for sample in samples]
    assert 0 < sum(per_document["acc"]) < len(samples)  # both verdicts occur, so a flipped flag would show
    theirs = [sample["metrics"]["perplexity"] for sample in samples]
    mean_bound, _ = aggregate_bounds(list(per_document["perplexity"]), theirs)
    results, overall = reference["results"], evaluation.scores.overall
    assert overall["acc"].value == pytest.approx(results["acc"], abs=1e-12)
    assert overall["acc"].stderr == pytest.approx(results["acc_stderr"], abs=1e-12)
    # exp(-mean): a mean log-likelihood within `mean_bound` moves the perplexity by at most a factor exp(mean_bound)
    assert overall["perplexity"].value == pytest.approx(results["perplexity"], rel=math.expm1(mean_bound))
