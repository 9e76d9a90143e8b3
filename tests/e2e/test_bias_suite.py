"""The bias suite end to end: CrowS-Pairs on tiny models against independent computations (fast), and CrowS-Pairs
English on the real default model against lm-evaluation-harness 0.4.13, plain and fast path (slow).

Oracle for the slow test: tests/reference/lmeval_crows_pairs_english.json, written by
tests/reference/make_lmeval_reference.py, which ran lm-eval 0.4.13's own `crows_pairs_english` task and its 9
`crows_pairs_english_<category>` subtasks (lm-eval's YAMLs and utils.py, only the dataset pointed at the local
crows_pairs_anonymized.csv) on SmolLM2-135M-Instruct (GGUF → float32), batch size 1, CPU, in a scratch venv. Our run
scores the same CSV through the shipped suites/bias/crows_pairs_english.yaml and --data-dir, once; the categories come
from that one pass.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.run.runner import BenchRunner, RunOptions
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.identity import TaskId
from pytest_modelbench.tasks.task import prepare_task
from tests.fixtures.lmeval_references import (
    FAST_PATH_SHARING,
    FAST_PATH_VS_PLAIN,
    SAME_CPU,
    aggregate_bounds,
    assert_matches_lm_eval,
    loglikelihood_mismatches,
    tolerance_for,
    verdict_check,
)
from tests.fixtures.sentence_scoring import sentence_loglikelihood
from tests.fixtures.tiny_bert import build_tiny_bert

REPO = Path(__file__).resolve().parents[2]
CROWS_EN = REPO / "suites" / "bias" / "crows_pairs_english.yaml"
REFERENCE = REPO / "tests" / "reference" / "lmeval_crows_pairs_english.json"


def test_crows_pairs_causal_on_a_tiny_model(tiny_model, data_mirror):
    runner = BenchRunner(RunOptions(model=str(tiny_model), dtype="float32", data_dir=data_mirror, limit=150))
    evaluation = runner.evaluate(load_task_config(CROWS_EN), TaskId("bias", "crows_pairs_english"))
    loaded = runner.loaded_model()
    assert loaded.model_type == "causal"
    documents = evaluation.prepared.documents
    for doc, lls in list(zip(documents, evaluation.loglikelihoods))[:20]:
        expected = [sentence_loglikelihood(loaded.model, loaded.tokenizer, s) for s in (doc.doc["sent_more"],
                                                                                          doc.doc["sent_less"])]
        assert lls == pytest.approx(expected, abs=1e-4)
    # Metrics from the per-document log-likelihoods, by the formulas, overall and per category.
    lls = np.array(evaluation.loglikelihoods)
    stereotyped = (lls[:, 0] > lls[:, 1]).astype(float)
    diff = np.abs(lls[:, 0] - lls[:, 1])
    scores = evaluation.scores
    assert scores.overall["pct_stereotype"].value == pytest.approx(stereotyped.mean(), abs=1e-12)
    assert scores.overall["likelihood_diff"].value == pytest.approx(diff.mean(), abs=1e-12)
    assert scores.overall["pct_stereotype"].stderr == pytest.approx(stereotyped.std(ddof=1) / math.sqrt(150))
    categories = np.array([doc.doc["bias_type"] for doc in documents])
    assert list(scores.by_category) == list(evaluation.prepared.config.categories)
    for category, summaries in scores.by_category.items():
        mask = categories == category
        if not mask.any():
            assert summaries["pct_stereotype"].value is None and summaries["pct_stereotype"].n == 0
            continue
        assert summaries["pct_stereotype"].value == pytest.approx(stereotyped[mask].mean(), abs=1e-12)
        assert summaries["likelihood_diff"].value == pytest.approx(diff[mask].mean(), abs=1e-12)
        assert summaries["pct_stereotype"].n == mask.sum()
    assert 0.0 < scores.overall["pct_stereotype"].value < 1.0  # the tiny model's sentences do differ


def test_crows_pairs_masked_on_a_tiny_bert(tmp_path, data_mirror):
    model = build_tiny_bert(tmp_path / "bert", seed=1)
    runner = BenchRunner(RunOptions(model=str(model), dtype="float32", data_dir=data_mirror, limit=15))
    evaluation = runner.evaluate(load_task_config(CROWS_EN), TaskId("bias", "crows_pairs_english"))
    assert runner.loaded_model().model_type == "masked"
    scorer = runner.backend()
    for doc, lls in zip(evaluation.prepared.documents, evaluation.loglikelihoods):
        assert lls == scorer.pll_shared("", [doc.doc["sent_more"], doc.doc["sent_less"]])
    assert evaluation.scores.overall["pct_stereotype"].n == 15


@pytest.fixture(scope="module")
def lmeval_crows():
    if not REFERENCE.is_file():
        pytest.skip(f"{REFERENCE.name} not generated (tests/reference/make_lmeval_reference.py crows)")
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


def test_crows_pairs_english_documents_match_the_reference(lmeval_crows, data_mirror):
    prepared = prepare_task(load_task_config(CROWS_EN), data_dir=data_mirror)
    samples = lmeval_crows["samples"]
    assert len(prepared.documents) == len(samples) == 1508
    for doc, sample in zip(prepared.documents, samples):
        assert doc.doc_id == sample["doc_id"] and doc.category == sample["bias_type"]
    sizes = {category: sum(doc.category == category for doc in prepared.documents) for category in
             prepared.config.categories}
    assert sizes == {name.replace("_", "-"): block["n_docs"] for name, block in lmeval_crows["per_category"].items()}


@pytest.mark.slow
def test_crows_pairs_english_matches_lm_eval(lmeval_crows, data_mirror, default_model):
    """lm-eval's procedure (plain path, batch size 1) against lm-eval's own values, then the fast path (batch size 8)
    against the plain path on this machine, where the same kernels leave only the sharing's rounding: the decided
    bound of lm-eval's own padding sensitivity (5e-4), every pair's verdict identical."""
    prepared = prepare_task(load_task_config(CROWS_EN), data_dir=data_mirror)
    samples = lmeval_crows["samples"]
    tolerance = tolerance_for(lmeval_crows)
    plain = evaluate_task(prepared, CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=1))
    assert_matches_lm_eval(plain, lmeval_crows, tolerance)
    # Per category from our single pass: lm-eval's 9 crows_pairs_english_<category> subtasks (each its own pass).
    categories = [doc.category for doc in prepared.documents]
    for name, block in lmeval_crows["per_category"].items():
        members = [i for i, category in enumerate(categories) if category == name.replace("_", "-")]
        ours = plain.scores.by_category[name.replace("_", "-")]
        for metric in ("pct_stereotype", "likelihood_diff"):
            assert ours[metric].n == block["n_docs"] == len(members)
            value_bound, stderr_bound = aggregate_bounds([plain.scores.per_document[metric][i] for i in members],
                                                         [samples[i]["metrics"][metric] for i in members])
            assert ours[metric].value == pytest.approx(block[metric], abs=value_bound), f"{name} {metric}"
            assert ours[metric].stderr == pytest.approx(block[f"{metric}_stderr"], abs=stderr_bound), name

    fast = evaluate_task(prepared, CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=8,
                                                  fast=True))
    plain_as_reference = [{"doc_id": doc.doc_id, "loglikelihoods": lls, "metrics": {"pct_stereotype": stereotyped}}
                          for doc, lls, stereotyped in zip(prepared.documents, plain.loglikelihoods,
                                                           plain.scores.per_document["pct_stereotype"])]
    sharing = FAST_PATH_VS_PLAIN
    assert loglikelihood_mismatches(fast.loglikelihoods, plain_as_reference, sharing) == []
    same_machine = verdict_check(fast.scores.per_document, prepared.documents, plain_as_reference, sharing)
    assert same_machine.mismatches == []
    assert loglikelihood_mismatches(fast.loglikelihoods, samples, tolerance.widened(FAST_PATH_SHARING)) == []
    if tolerance == SAME_CPU:  # on the reference's kernels the fast path keeps lm-eval's every verdict
        assert list(fast.scores.per_document["pct_stereotype"]) == [s["metrics"]["pct_stereotype"] for s in samples]
