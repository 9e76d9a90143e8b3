"""loglikelihood_rolling parity with lm-evaluation-harness 0.4.13 on the real default model.

Oracle: tests/reference/lmeval_rolling_*.json, written by lm-eval 0.4.13 itself (HF backend, SmolLM2-135M-Instruct GGUF
dequantized to float32, batch size 1, CPU, --limit 20, model arg max_length=16 so that most texts span several rolling
windows) running suites/perplexity's YAML with only the dataset location changed and the `modelbench:` block removed
(tests/reference/make_lmeval_reference.py, run `rolling`). Log-likelihoods are held to lm-eval's within 1e-4 on a CPU
with the reference's kernels and within the measured cross-CPU bound elsewhere (tests/fixtures/lmeval_references.py).
"""

from __future__ import annotations

import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from tests.fixtures.lmeval_references import REFERENCE_DIR, reference_task, tolerance_for

ROLLING_REFERENCES = sorted(p.name for p in REFERENCE_DIR.glob("lmeval_rolling_*.json"))


@pytest.fixture(params=ROLLING_REFERENCES, ids=lambda name: name.removeprefix("lmeval_rolling_").removesuffix(".json"))
def reference_run(request, data_mirror):
    return reference_task(request.param, data_mirror, {})


def test_texts_match_lm_eval(reference_run):
    reference, prepared = reference_run
    assert len(ROLLING_REFERENCES) == 1
    assert [doc.gold for doc in prepared.documents] == [s["text"] for s in reference["samples"]]


@pytest.mark.slow
def test_rolling_loglikelihoods_and_perplexities_match_lm_eval(reference_run, default_model):
    reference, prepared = reference_run
    max_length = reference["provenance"]["max_length"]
    scorer = CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1, max_length=max_length)
    evaluation = evaluate_task(prepared, scorer)
    tolerance = tolerance_for(reference)
    for ours, sample in zip(evaluation.loglikelihoods, reference["samples"], strict=True):
        theirs = sample["loglikelihood"]
        assert abs(ours[0] - theirs) <= tolerance.bound(theirs), (sample["doc_id"], ours[0], theirs)
    for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert evaluation.scores.overall[metric].value == pytest.approx(reference["results"][metric], rel=1e-5)
