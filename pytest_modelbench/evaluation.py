"""One task, end to end: prepared documents → scorer → per-document log-likelihoods → scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from pytest_modelbench.metrics.aggregate import TaskScores, score_task
from pytest_modelbench.metrics.registry import resolve_metrics
from pytest_modelbench.tasks.task import PreparedTask


class Scorer(Protocol):
    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]: ...


@dataclass(frozen=True)
class TaskEvaluation:
    prepared: PreparedTask
    loglikelihoods: list[list[float]]
    scores: TaskScores


def evaluate_task(prepared: PreparedTask, scorer: Scorer) -> TaskEvaluation:
    metrics = resolve_metrics(prepared.config)
    flat = [(doc.context, cont) for doc in prepared.documents for cont in doc.continuations]
    values = scorer.loglikelihood(flat)
    per_doc, start = [], 0
    for doc in prepared.documents:
        per_doc.append(values[start:start + len(doc.continuations)])
        start += len(doc.continuations)
    return TaskEvaluation(prepared, per_doc, score_task(prepared, metrics, per_doc))
