"""Multiple-choice `f1` and `mcc` as lm-eval 0.4.13 computes them: per document the pair (gold index, predicted
index), the prediction being the argmax of the choices' log-likelihoods (first index wins a tie); over the documents
sklearn's `f1_score(golds, preds)` and `matthews_corrcoef(golds, preds)`, computed here from their definitions.

`f1` is sklearn's default binary F1 of label 1 (choice index 1 is the positive class): 2·TP / (2·TP + FP + FN), 0 when
that is 0/0 (sklearn warns and returns 0). A task whose golds and predictions hold more than two labels, or two
labels without 1, is an error, as it is in sklearn. lm-eval passes no options to the aggregation, so an `average`
in the YAML changes nothing there and nothing here.
`mcc` is the multiclass Matthews correlation (Gorodkin's R_K over the confusion matrix of the labels that occur),
0 when either side has a single label.
The per-document value stored (baselines, --log-samples) is the predicted index; the gate resamples documents and
re-applies the aggregate.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from pytest_modelbench.errors import MetricError


def predicted_choice(doc, lls: Sequence[float]) -> float:
    return float(np.argmax(lls))


def _labels(values: Mapping[str, np.ndarray], name: str, documents: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(golds, predictions) as integer arrays; a document with several golds has no single label."""
    several = next((doc for doc in documents if isinstance(doc.gold, tuple)), None)
    if several is not None:
        raise MetricError(
            f"document {several.doc_id}: metric '{name}' needs one gold choice per document, "
            f"found {list(several.gold)} (lm-eval's sklearn call fails on a list of golds)"
        )
    return np.array([doc.gold for doc in documents], dtype=np.int64), np.asarray(values[name], dtype=np.int64)


def aggregate_f1(values: Mapping[str, np.ndarray], documents: Sequence) -> float:
    golds, preds = _labels(values, "f1", documents)
    labels = sorted(set(golds.tolist()) | set(preds.tolist()))
    if len(labels) > 2:
        raise MetricError(
            f"metric 'f1' is lm-eval's binary F1 (sklearn f1_score, average='binary'), but golds and predictions hold "
            f"{len(labels)} choice indices {labels}; sklearn refuses more than two"
        )
    if len(labels) == 2 and 1 not in labels:
        raise MetricError(
            f"metric 'f1' is lm-eval's binary F1 of choice index 1, but golds and predictions hold only {labels}; "
            "sklearn refuses a positive label that does not occur"
        )
    true_positive = np.count_nonzero((golds == 1) & (preds == 1))
    wrong = np.count_nonzero((golds == 1) != (preds == 1))  # false positives plus false negatives
    denominator = 2 * true_positive + wrong
    return 0.0 if denominator == 0 else float(2 * true_positive / denominator)


def aggregate_mcc(values: Mapping[str, np.ndarray], documents: Sequence) -> float:
    golds, preds = _labels(values, "mcc", documents)
    labels = np.union1d(golds, preds)
    confusion = np.zeros((len(labels), len(labels)), dtype=np.float64)
    np.add.at(confusion, (np.searchsorted(labels, golds), np.searchsorted(labels, preds)), 1.0)
    gold_totals, pred_totals = confusion.sum(axis=1), confusion.sum(axis=0)
    n = float(len(golds))
    covariance = np.trace(confusion) * n - gold_totals @ pred_totals
    gold_variance = n * n - gold_totals @ gold_totals
    pred_variance = n * n - pred_totals @ pred_totals
    if gold_variance * pred_variance == 0:
        return 0.0
    return float(covariance / np.sqrt(gold_variance * pred_variance))
