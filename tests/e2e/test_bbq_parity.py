"""BBQ parity with lm-evaluation-harness 0.4.13's `bbq` task on the real default model.

Oracle: tests/reference/lmeval_bbq_subset.json, written by tests/reference/make_lmeval_bbq_reference.py, which ran
lm-eval's own bbq_multiple_choice.yaml and utils.py (only the dataset pointed at a local JSONL file) on 60 documents of
the local BBQ data (Age, Gender_identity, Nationality: five four-row templates each), SmolLM2-135M-Instruct (GGUF →
float32), batch size 1, CPU, in a scratch venv. Here the shipped suites/bbq/bbq.yaml (our utils.py, not lm-eval's)
reads the same rows through --data-dir.

Without the model: the 12 requests per document are lm-eval's, and lm-eval's own log-likelihoods through our
process_results and aggregations give lm-eval's per-document items and its numbers, overall and per category, to the
last bit. With the model (slow), scored as a run scores it (shared prefixes: a document's context once for its 12
continuations; batch size 8): our log-likelihoods are within the tolerance of tests/fixtures/lmeval_references.py
widened by FAST_PATH_SHARING, the answers are lm-eval's wherever the reference does not leave two different answers
within it of a tie, and then the numbers are lm-eval's again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pytest_modelbench.run.evaluation import evaluate_task
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.task import prepare_task
from tests.conftest import _load_script
from tests.fixtures.lmeval_references import FAST_PATH_SHARING, load_reference, loglikelihood_mismatches, tolerance_for

REPO = Path(__file__).resolve().parents[2]
BBQ = REPO / "suites" / "bbq" / "bbq.yaml"
METRICS = ("acc", "accuracy_amb", "accuracy_disamb", "amb_bias_score", "disamb_bias_score")
mirror = _load_script("shared_data_mirror")


class FixedLogLikelihoods:
    """A backend that answers with given log-likelihoods, document by document."""

    def __init__(self, rows):
        self.rows = rows

    def score_task(self, prepared):
        return [ll for doc in prepared.documents for ll in self.rows[doc.doc_id]]


def subset_data_dir(reference: dict, shared_data: Path, folder: Path) -> Path:
    """The reference's rows, in its order, where --data-dir serves the hub dataset from."""
    data = reference["provenance"]["data"]
    rows = []
    for category, chosen in data["subset"].items():
        source = shared_data / chosen["file"]
        assert hashlib.sha256(source.read_bytes()).hexdigest() == data["sha256"][chosen["file"]], source
        everything = (mirror.bbq_csv_rows(source) if source.suffix == ".csv" else
                      [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()])
        rows += [everything[position] for position in chosen["row_positions_0_based"]]
    mirror.write_jsonl(folder / mirror.BBQ_FOLDER / "test.jsonl", rows)
    return folder


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, shared_data):
    reference = load_reference("lmeval_bbq_subset.json")
    data_dir = subset_data_dir(reference, shared_data, tmp_path_factory.mktemp("bbq_subset"))
    return reference, prepare_task(load_task_config(BBQ, allow_task_code=True), data_dir=data_dir)


def document_items(scores, i: int) -> dict:
    return {metric: (float(scores.per_document[metric][i]) if metric == "acc" else
                     [float(v) for v in scores.per_document[metric][i]]) for metric in METRICS}


def lm_eval_items(sample: dict) -> dict:
    """lm-eval's logged items as numbers: it logs the disambiguation mask (a numpy bool) as "True"/"False"."""
    def number(value):
        return float(value in (True, "True")) if isinstance(value, (bool, str)) else float(value)

    return {metric: (number(sample["metrics"][metric]) if metric == "acc" else
                     [number(v) for v in sample["metrics"][metric]]) for metric in METRICS}


def assert_numbers_are_lm_evals(scores, reference: dict) -> None:
    for metric in METRICS:
        assert scores.overall[metric].value == pytest.approx(reference["results"][metric], rel=0, abs=1e-12), metric
    assert list(reference["per_category"]) == [c for c in scores.by_category if scores.by_category[c]["acc"].n]
    for category, expected in reference["per_category"].items():
        for metric in METRICS:
            assert scores.by_category[category][metric].value == pytest.approx(expected[metric], rel=0, abs=1e-12), \
                (category, metric)


def test_requests_are_lm_evals(reference_run):
    reference, prepared = reference_run
    samples = reference["samples"]
    assert len(prepared.documents) == len(samples) == 60
    for doc, sample in zip(prepared.documents, samples):
        assert (doc.doc_id, doc.category) == (sample["doc_id"], sample["category"])
        assert [[doc.context, continuation] for continuation in doc.continuations] == sample["requests"]


def test_lm_evals_loglikelihoods_give_lm_evals_items_and_numbers(reference_run):
    """Our process_docs, process_results and aggregations on lm-eval's own log-likelihoods."""
    reference, prepared = reference_run
    samples = reference["samples"]
    evaluation = evaluate_task(prepared, FixedLogLikelihoods([s["loglikelihoods"] for s in samples]))
    for i, sample in enumerate(samples):
        assert document_items(evaluation.scores, i) == lm_eval_items(sample), f"document {sample['doc_id']}"
    biased = [s for s in samples if lm_eval_items(s)["disamb_bias_score"][1]]
    answered_unknown = [s for s in samples if not lm_eval_items(s)["disamb_bias_score"][2]]
    assert biased and answered_unknown and len(answered_unknown) < len(samples)  # the bias scores are not trivial
    assert_numbers_are_lm_evals(evaluation.scores, reference)


def outcome(choice: int) -> int:
    """What an answer means for the metrics: either group answer, or "unknown" (continuations 2 to 11 alike)."""
    return min(choice, 2)


def near_tie(loglikelihoods, tolerance) -> bool:
    """Whether the reference's best answer is within the tolerance of a choice with another outcome."""
    best = max(range(len(loglikelihoods)), key=loglikelihoods.__getitem__)
    top = loglikelihoods[best]
    return any(outcome(i) != outcome(best) and
               top - value <= tolerance.bound(top) + tolerance.bound(value)
               for i, value in enumerate(loglikelihoods))


@pytest.mark.slow
def test_loglikelihoods_and_numbers_match_lm_eval(reference_run, default_model):
    reference, prepared = reference_run
    samples = reference["samples"]
    tolerance = tolerance_for(reference).widened(FAST_PATH_SHARING)
    scorer = CausalLMScorer(default_model.model, default_model.tokenizer, batch_size=8, fast=True)
    evaluation = evaluate_task(prepared, scorer)
    pairs = scorer.encoder.encode_pairs([(doc.context, c) for doc in prepared.documents for c in doc.continuations])
    assert scorer.last_stats.computed_tokens < sum(len(e.context) + len(e.continuation) - 1 for e in pairs) / 4
    mismatches = loglikelihood_mismatches(evaluation.loglikelihoods, samples, tolerance)
    assert not mismatches, f"{len(mismatches)} log-likelihoods outside {tolerance}:\n" + "\n".join(mismatches[:20])
    ties = [s["doc_id"] for s in samples if near_tie(s["loglikelihoods"], tolerance)]
    for i, sample in enumerate(samples):
        if sample["doc_id"] not in ties:
            assert document_items(evaluation.scores, i) == lm_eval_items(sample), f"document {sample['doc_id']}"
    if not ties:  # a near tie may go either way on other kernels; then the items above are the evidence
        assert_numbers_are_lm_evals(evaluation.scores, reference)
