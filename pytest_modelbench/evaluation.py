"""One task, end to end: prepared documents → backend → per-document log-likelihoods → scores."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from pytest_modelbench.errors import DocumentError, RequestError, TaskConfigError
from pytest_modelbench.metrics.aggregate import TaskScores, score_task
from pytest_modelbench.metrics.registry import resolve_metrics
from pytest_modelbench.scoring.backend import Backend
from pytest_modelbench.tasks.requests import DocumentRequests
from pytest_modelbench.tasks.task import PreparedTask


@dataclass(frozen=True)
class TaskEvaluation:
    prepared: PreparedTask
    loglikelihoods: list[list[float]]  # per document, one per choice or continuation (none for generate_until)
    scores: TaskScores
    generations: list[str] | None = None  # generate_until: the raw generation per document
    answers: list[dict[str, str]] | None = None  # generate_until: per document, the answer of each filter pipeline
    greedy: list[bool] | None = None  # loglikelihood: per document, whether its continuation is the greedy one


def evaluate_task(prepared: PreparedTask, backend: Backend) -> TaskEvaluation:
    metrics = resolve_metrics(prepared.config)
    if prepared.config.output_type == "generate_until":
        return _evaluate_generation(prepared, backend, metrics)
    if prepared.config.output_type == "loglikelihood_rolling":
        return _evaluate_rolling(prepared, backend, metrics)
    if prepared.config.output_type == "loglikelihood":
        return _evaluate_loglikelihood(prepared, backend, metrics)
    try:
        values = backend.score_task(prepared)
    except RequestError as exc:
        if exc.index is None:
            raise
        owners = [(doc, i) for doc in prepared.documents for i in range(len(doc.continuations))]
        raise DocumentError(f"{_where(prepared, *owners[exc.index])}: {exc.problem}") from None
    per_doc, start = [], 0
    for doc in prepared.documents:
        per_doc.append(values[start:start + len(doc.continuations)])
        start += len(doc.continuations)
        _check_finite(prepared, doc, per_doc[-1])
    return TaskEvaluation(prepared, per_doc, score_task(prepared, metrics, per_doc))


def _evaluate_generation(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    try:
        generations = backend.generate_task(prepared)
    except RequestError as exc:
        raise TaskConfigError(f"{prepared.config.source}: task '{prepared.config.task}': {exc.problem}") from None
    answers = []
    for doc, generation in zip(prepared.documents, generations):
        where = f"{prepared.config.source}: task '{prepared.config.task}', document {doc.doc_id}"
        answers.append({pipeline.name: pipeline.apply(generation, doc.doc, where)
                        for pipeline in prepared.config.filters})
    scores = score_task(prepared, metrics, answers)
    return TaskEvaluation(prepared, [[] for _ in prepared.documents], scores, generations, answers)


def _evaluate_rolling(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    """One value per document: its text's log-likelihood over lm-eval's rolling windows."""
    try:
        per_doc = [[value] for value in backend.rolling_loglikelihood_task(prepared)]
    except RequestError as exc:
        raise TaskConfigError(f"{prepared.config.source}: task '{prepared.config.task}': {exc.problem}") from None
    for doc, values in zip(prepared.documents, per_doc):
        _check_finite(prepared, doc, values)
    return TaskEvaluation(prepared, per_doc, score_task(prepared, metrics, per_doc))


def _evaluate_loglikelihood(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    """One response per document, as lm-eval's: its continuation's log-likelihood and whether it is greedy."""
    try:
        responses = backend.loglikelihood_task(prepared)
    except RequestError as exc:
        if exc.index is None:
            raise
        raise DocumentError(f"{_where(prepared, prepared.documents[exc.index], 0)}: {exc.problem}") from None
    for doc, (loglikelihood, _) in zip(prepared.documents, responses):
        _check_finite(prepared, doc, [loglikelihood])
    return TaskEvaluation(prepared, [[loglikelihood] for loglikelihood, _ in responses],
                          score_task(prepared, metrics, responses), greedy=[greedy for _, greedy in responses])


def _check_finite(prepared: PreparedTask, doc: DocumentRequests, values: Sequence[float]) -> None:
    """A NaN or infinite log-likelihood would turn into a wrong accuracy (argmax of NaN) without a word."""
    for i, value in enumerate(values):
        if not math.isfinite(value):
            raise DocumentError(
                f"{_where(prepared, doc, i)}: the model gave a non-finite log-likelihood ({value}); "
                "with --dtype float16 or bfloat16 this is usually an overflow, try --dtype float32"
            )


def _where(prepared: PreparedTask, doc: DocumentRequests, choice: int) -> str:
    config = prepared.config
    where = f"{config.source}: task '{config.task}', document {doc.doc_id}"
    if not doc.continuations:  # loglikelihood_rolling: the document's text is what was scored
        return where
    if not doc.choices:  # loglikelihood: one continuation, the target
        return f"{where}, continuation {doc.continuations[0]!r}"
    return f"{where}, choice {choice} ({doc.continuations[choice]!r})"
