"""Per-document metric values → task scores, overall and per category (one scoring pass serves all)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

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


def score_task(
    prepared: PreparedTask, metrics: Sequence[Metric], loglikelihoods: Sequence[Sequence[float]]
) -> TaskScores:
    config = prepared.config
    per_document = {
        metric.name: np.array([metric.per_document(doc, lls) for doc, lls in zip(prepared.documents, loglikelihoods)])
        for metric in metrics
    }
    overall = {name: MetricSummary.of(values) for name, values in per_document.items()}
    categories = np.array([doc.category for doc in prepared.documents], dtype=object)
    by_category = {}
    if config.category_field is not None:
        for category in sorted(set(categories)):
            mask = categories == category
            by_category[category] = {name: MetricSummary.of(values[mask]) for name, values in per_document.items()}
    return TaskScores(config.task, tuple(metrics), per_document, overall, by_category)
