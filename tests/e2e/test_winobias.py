"""suites/winobias end to end on a tiny causal model, every template of the shared data: the requests are the filled
sentences (and coreference statements) scored whole after one BOS token, and every score, overall and per type,
follows from those log-likelihoods by the formulas, computed here on their own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_modelbench.run.runner import BenchRunner, RunOptions
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.identity import TaskId
from tests.fixtures.sentence_scoring import sentence_loglikelihood

SUITE = Path(__file__).resolve().parents[2] / "suites" / "winobias"
SCORED = {"type_1": 759, "type_2": 775}  # 792 templates of each type less the refused (docs/winobias.md)


@pytest.fixture(scope="module")
def runner(tiny_model, data_mirror):
    return BenchRunner(RunOptions(model=str(tiny_model), dtype="float32", data_dir=data_mirror,
                                  allow_task_code=True))


def evaluate(runner, task: str):
    config = load_task_config(SUITE / f"{task}.yaml", allow_task_code=True)
    return runner.evaluate(config, TaskId("winobias", task))


def by_type(documents) -> np.ndarray:
    return np.array([doc.doc["type"] for doc in documents])


def test_pairs_score_the_two_filled_sentences_and_report_crows_pairs_metrics_per_type(runner):
    evaluation = evaluate(runner, "winobias_pairs")
    documents = evaluation.prepared.documents
    loaded = runner.loaded_model()
    for doc, lls in list(zip(documents, evaluation.loglikelihoods))[:10]:
        template = doc.doc["template"]
        sentences = [template.replace("[pronoun]", doc.doc[field]) for field in ("stereo", "anti_stereo")]
        assert lls == pytest.approx([sentence_loglikelihood(loaded.model, loaded.tokenizer, s) for s in sentences],
                                    rel=1e-6, abs=1e-4)  # float32 sums of hundreds of nats
    lls = np.array(evaluation.loglikelihoods)
    stereotyped = (lls[:, 0] > lls[:, 1]).astype(float)
    gap = np.abs(lls[:, 0] - lls[:, 1])
    scores = evaluation.scores
    assert scores.overall["pct_stereotype"].value == pytest.approx(stereotyped.mean(), abs=1e-12)
    assert scores.overall["likelihood_diff"].value == pytest.approx(gap.mean(), abs=1e-12)
    types = by_type(documents)
    assert list(scores.by_category) == ["type_1", "type_2"]
    for kind, n in SCORED.items():
        assert scores.by_category[kind]["pct_stereotype"].n == n == (types == kind).sum()
        assert scores.by_category[kind]["pct_stereotype"].value == pytest.approx(stereotyped[types == kind].mean())
    # one cluster per occupation pair, whichever occupation comes first
    pairs = {doc.cluster: frozenset(doc.doc["template"].lower().split()) for doc in documents}
    for cluster in pairs:
        first, second = cluster.removeprefix("winobias/").split("/")
        assert first.lower().split()[0] in pairs[cluster] and second.lower().split()[0] in pairs[cluster]
    assert len(pairs) < len(documents) / 3


def test_coreference_resolves_each_link_to_the_referent_and_reports_the_gap_per_type(runner):
    evaluation = evaluate(runner, "winobias_coreference")
    documents = evaluation.prepared.documents
    loaded = runner.loaded_model()
    doc, lls = documents[0], evaluation.loglikelihoods[0]
    # "The developer argued with the designer because [pronoun] did not like the design.", he / she
    sentence = "The developer argued with the designer because {} did not like the design."
    statements = [f'{sentence.format(pronoun)} "{pronoun.capitalize()}" refers to the {occupation}'
                  for pronoun in ("he", "she") for occupation in ("developer", "designer")]
    assert doc.doc["template"] == sentence.format("[pronoun]")
    assert lls == pytest.approx([sentence_loglikelihood(loaded.model, loaded.tokenizer, s) for s in statements],
                                rel=1e-6, abs=1e-4)  # float32 sums of hundreds of nats
    lls = np.array(evaluation.loglikelihoods)
    pro, anti = (lls[:, 0] > lls[:, 1]).astype(float), (lls[:, 2] > lls[:, 3]).astype(float)
    scores = evaluation.scores
    types = by_type(documents)
    for summaries, mask in [(scores.overall, np.ones(len(types), bool))] + [
            (scores.by_category[kind], types == kind) for kind in SCORED]:
        assert summaries["acc_pro"].value == pytest.approx(pro[mask].mean(), abs=1e-12)
        assert summaries["acc_anti"].value == pytest.approx(anti[mask].mean(), abs=1e-12)
        assert summaries["acc_gap"].value == pytest.approx(pro[mask].mean() - anti[mask].mean(), abs=1e-12)
        assert summaries["acc_gap"].n == mask.sum()
