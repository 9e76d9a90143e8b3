"""Per-document metric values → task scores, overall and per category (one scoring pass serves all)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pytest_modelbench.errors import DocumentError, MetricError
from pytest_modelbench.metrics.registry import Metric
from pytest_modelbench.tasks.task import PreparedTask


@dataclass(frozen=True)
class MetricSummary:
    """Mean over documents with lm-eval's stderr (sample std with n−1, over √n). Empty: value None."""

    value: float | None
    stderr: float | None
    n: int

    @classmethod
    def of(cls, values: np.ndarray) -> "MetricSummary":
        n = len(values)
        if n == 0:
            return cls(None, None, 0)
        stderr = float(np.std(values, ddof=1) / math.sqrt(n)) if n > 1 else None
        return cls(float(np.mean(values)), stderr, n)


@dataclass(frozen=True)
class TaskScores:
    task: str
    metrics: tuple[Metric, ...]
    per_document: dict[str, np.ndarray]
    overall: dict[str, MetricSummary]
    by_category: dict[str, dict[str, MetricSummary]]

    def aggregates(self) -> dict[str, Any]:
        """Each metric's own aggregate over the documents, by name, for the metrics that have one (the gate's
        comparison re-applies it, gate/compare.py)."""
        return {m.name: m.aggregate for m in self.metrics if m.aggregate is not None}


def score_task(
    prepared: PreparedTask, metrics: Sequence[Metric], loglikelihoods: Sequence[Sequence[float]]
) -> TaskScores:
    config = prepared.config
    try:
        per_document = {
            metric.name: document_column(
                metric.name, [metric.per_document(doc, lls) for doc, lls in zip(prepared.documents, loglikelihoods)],
                prepared.documents,
            )
            for metric in metrics
            if metric.per_document is not None
        }
        documents = prepared.documents
        everything = np.ones(len(documents), dtype=bool)
        overall = {metric.name: _summarise(metric, per_document, documents, everything) for metric in metrics}
        categories = np.array([doc.category for doc in documents], dtype=object)
        by_category = {}
        if config.category_field is not None:
            # Declared categories (modelbench.categories) come first, in their order, so an empty one is reported.
            for category in _category_order(config.categories, categories):
                mask = categories == category
                by_category[category] = {
                    metric.name: _summarise(metric, per_document, documents, mask) for metric in metrics
                }
    except (DocumentError, MetricError) as exc:
        raise type(exc)(f"{config.source}: task '{config.task}', {exc}") from None
    return TaskScores(config.task, tuple(metrics), per_document, overall, by_category)


class DocumentItems(tuple):
    """One document's value that is a list of numbers, of any length: a process_results value for an `aggregation:
    !function` (IFEval's per-instruction outcomes). Its column holds one float array per document."""


def document_column(name: str, values: Sequence, documents: Sequence) -> np.ndarray:
    """A metric's per-document values as one array: floats (one per document, or a fixed-length row of statistics
    for bleu/chrf/ter), or for DocumentItems an object array holding each document's own float array."""
    lists = [isinstance(value, DocumentItems) for value in values]
    if not any(lists):
        return np.array(values, dtype=float)
    if not all(lists):
        listed, number = documents[lists.index(True)], documents[lists.index(False)]
        raise DocumentError(f"document {number.doc_id}: metric '{name}' is a number there but a list on document "
                            f"{listed.doc_id}; process_results must return the same kind of value on every document")
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # one by one: equal lengths would otherwise make a 2-D array
        column[i] = np.array(value, dtype=float)
    return column


def _category_order(declared: Sequence[str] | None, found: np.ndarray) -> list[str]:
    present = sorted(set(found) - {None})
    if not declared:
        return present
    return list(declared) + [category for category in present if category not in declared]


def _summarise(
    metric: Metric, per_document: dict[str, np.ndarray], documents: Sequence, mask: np.ndarray
) -> MetricSummary:
    """The plain mean (lm-eval's, with stderr), or the metric's own aggregate over the masked documents."""
    if metric.aggregate is None:
        return MetricSummary.of(per_document[metric.name][mask])
    n = int(mask.sum())
    if n == 0:
        return MetricSummary(None, None, 0)
    selected = [doc for doc, keep in zip(documents, mask) if keep]
    value = metric.aggregate({name: values[mask] for name, values in per_document.items()}, selected)
    return MetricSummary(value, None, n)
