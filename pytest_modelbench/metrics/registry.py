"""Per-document metrics over a document's responses (its choices' log-likelihoods; for a loglikelihood task its
continuation's (log-likelihood, is_greedy)), with the direction the gate needs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from pytest_modelbench.metrics import bias, classification, loglikelihood, perplexity
from pytest_modelbench.tasks.requests import DocumentRequests


@dataclass(frozen=True)
class Direction:
    """How a metric improves: `higher`, `lower`, or towards an `ideal` point (e.g. 0.5 for a bias score)."""

    kind: str
    ideal: float | None = None

    def badness(self, value: float) -> float:
        """A quantity that grows as the metric gets worse; the gate compares these."""
        if self.kind == "higher":
            return -value
        if self.kind == "lower":
            return value
        return abs(value - self.ideal)


HIGHER = Direction("higher")
LOWER = Direction("lower")


@dataclass(frozen=True)
class Margin:
    """How much worse than the baseline counts as a regression, in the metric's own units.

    The margin of an entry is max(absolute, relative × |baseline value|): absolute for a score on a fixed scale (an
    accuracy, a share of pairs), relative for one whose scale depends on the model (a log-likelihood gap in nats).
    """

    absolute: float = 0.0
    relative: float = 0.0

    def at(self, baseline_value: float) -> float:
        return max(self.absolute, self.relative * abs(baseline_value))


ONE_POINT = Margin(absolute=0.01)  # accuracies: one percentage point
TWO_POINTS = Margin(absolute=0.02)  # bias scores (shares of pairs or clusters, distances from an ideal share)


# A task-level value over a set of documents, from the per-document values of the task's metrics (by name).
Aggregate = Callable[[Mapping[str, np.ndarray], Sequence[DocumentRequests]], float | None]


@dataclass(frozen=True)
class Metric:
    name: str
    per_document: Callable[[DocumentRequests, Sequence[float]], float] | None
    direction: Direction
    binary: bool  # 0/1 per document: the gate uses McNemar; otherwise a paired bootstrap
    margin: Margin  # the gate's default non-inferiority margin (docs/gate.md, "Margins")
    # --- metrics that are not a plain mean over documents (StereoSet) ---
    # aggregate: the task-level value (overall, or over one category's documents) from the per-document values;
    # None means the mean with lm-eval's stderr. With an aggregate the summary has no stderr, and a paired
    # comparison must resample documents and re-apply the aggregate (per-document values alone do not give it).
    # per_document None: the metric has no per-document values of its own (ICAT is derived from LMS and SS).
    # inputs: other metrics whose per-document values `aggregate` reads; they must be in the same metric_list.
    aggregate: Aggregate | None = None
    inputs: tuple[str, ...] = ()


def _is_gold(pred: int, gold: int | tuple[int, ...]) -> float:
    return float(pred in gold) if isinstance(gold, tuple) else float(pred == gold)


def _acc(doc: DocumentRequests, lls: Sequence[float]) -> float:
    return _is_gold(int(np.argmax(lls)), doc.gold)


def _acc_norm(doc: DocumentRequests, lls: Sequence[float]) -> float:
    lengths = np.array([float(len(choice)) for choice in doc.choices])
    return _is_gold(int(np.argmax(np.asarray(lls) / lengths)), doc.gold)


def _acc_bytes(doc: DocumentRequests, lls: Sequence[float]) -> float:
    lengths = np.array([float(len(choice.encode("utf-8"))) for choice in doc.choices])
    return _is_gold(int(np.argmax(np.asarray(lls) / lengths)), doc.gold)


def _pct_stereotype(doc: DocumentRequests, lls: Sequence[float]) -> float:
    """CrowS-Pairs (lm-eval): the more-stereotyping sentence (choice 0) has the strictly higher log-likelihood."""
    return float(lls[0] > lls[1])


def _likelihood_diff(doc: DocumentRequests, lls: Sequence[float]) -> float:
    return abs(lls[0] - lls[1])


METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        Metric("acc", _acc, HIGHER, binary=True, margin=ONE_POINT),
        Metric("acc_norm", _acc_norm, HIGHER, binary=True, margin=ONE_POINT),
        Metric("acc_bytes", _acc_bytes, HIGHER, binary=True, margin=ONE_POINT),
        # lm-eval's sklearn aggregates over (gold, predicted index) pairs (metrics/classification.py); both noisier than
        # an accuracy on the same documents.
        Metric("f1", classification.predicted_choice, HIGHER, binary=False, margin=TWO_POINTS,
               aggregate=classification.aggregate_f1),
        Metric("mcc", classification.predicted_choice, HIGHER, binary=False, margin=TWO_POINTS,
               aggregate=classification.aggregate_mcc),
        Metric("pct_stereotype", _pct_stereotype, Direction("ideal", 0.5), binary=True, margin=TWO_POINTS),
        # A mean gap in nats whose size depends on the model (4-7 on CrowS-Pairs): 10% of the baseline's gap.
        Metric("likelihood_diff", _likelihood_diff, LOWER, binary=False, margin=Margin(relative=0.10)),
        # StereoSet (metrics/bias.py): per cluster, averaged per target term, then over terms.
        Metric("lms", bias.stereoset_lms, HIGHER, binary=False, margin=TWO_POINTS, aggregate=bias.aggregate_lms),
        Metric("ss", bias.stereoset_ss, Direction("ideal", 0.5), binary=True, margin=TWO_POINTS,
               aggregate=bias.aggregate_ss),
        Metric("icat", None, HIGHER, binary=False, margin=TWO_POINTS, aggregate=bias.aggregate_icat,
               inputs=("lms", "ss")),
        # loglikelihood_rolling (metrics/perplexity.py): per document the text's log-likelihood; a perplexity's scale
        # depends on the model and the text, so the margin is 2% of the baseline's value.
        Metric("word_perplexity", perplexity.document_loglikelihood, LOWER, binary=False,
               margin=Margin(relative=0.02), aggregate=perplexity.aggregate_word_perplexity),
        Metric("byte_perplexity", perplexity.document_loglikelihood, LOWER, binary=False,
               margin=Margin(relative=0.02), aggregate=perplexity.aggregate_byte_perplexity),
        Metric("bits_per_byte", perplexity.document_loglikelihood, LOWER, binary=False,
               margin=Margin(relative=0.02), aggregate=perplexity.aggregate_bits_per_byte),
        # loglikelihood (metrics/loglikelihood.py): per document the continuation's log-likelihood, the task value
        # exp(-mean); its scale depends on the model, as for the rolling perplexities.
        Metric("perplexity", loglikelihood.document_loglikelihood, LOWER, binary=False,
               margin=Margin(relative=0.02), aggregate=loglikelihood.aggregate_perplexity),
    )
}


def known_metrics(output_type: str) -> dict[str, Metric]:
    """The metrics a task of this output type may list, by name (generate_until's: metrics/generative.py).
    loglikelihood's acc is its is_greedy: other per-document values than multiple_choice's acc, with the same
    direction, margin and test, so the gate (which finds a metric by name in METRICS) treats both alike."""
    if output_type == "loglikelihood":
        return {"perplexity": METRICS["perplexity"],
                "acc": replace(METRICS["acc"], per_document=loglikelihood.document_is_greedy)}
    if output_type == "loglikelihood_rolling":
        return {name: METRICS[name] for name in perplexity.ROLLING_METRICS}
    other_types = {*perplexity.ROLLING_METRICS, "perplexity"}
    return {name: metric for name, metric in METRICS.items() if name not in other_types}
