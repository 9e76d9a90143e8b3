"""Per-document metrics over a document's choice log-likelihoods, with the direction the gate needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.tasks.config import TaskConfig
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
class Metric:
    name: str
    per_document: Callable[[DocumentRequests, Sequence[float]], float]
    direction: Direction
    binary: bool  # 0/1 per document: the gate uses McNemar; otherwise a paired bootstrap


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
        Metric("acc", _acc, HIGHER, binary=True),
        Metric("acc_norm", _acc_norm, HIGHER, binary=True),
        Metric("acc_bytes", _acc_bytes, HIGHER, binary=True),
        Metric("pct_stereotype", _pct_stereotype, Direction("ideal", 0.5), binary=True),
        Metric("likelihood_diff", _likelihood_diff, LOWER, binary=False),
    )
}


def resolve_metrics(config: TaskConfig) -> tuple[Metric, ...]:
    """The task's metric_list as metrics; an unknown name is an error naming the file."""
    unknown = [spec.name for spec in config.metric_list if spec.name not in METRICS]
    if unknown:
        raise TaskConfigError(
            f"{config.source}: unknown metric '{unknown[0]}' in metric_list (known: {', '.join(sorted(METRICS))})"
        )
    return tuple(METRICS[spec.name] for spec in config.metric_list)
