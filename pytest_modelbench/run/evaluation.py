"""One task, end to end: prepared documents → backend → per-document log-likelihoods → scores."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

from pytest_modelbench.errors import BackendError, DocumentError, RequestError, TaskConfigError
from pytest_modelbench.metrics.aggregate import TaskScores, score_task
from pytest_modelbench.metrics.process_results import document_values
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.numeric import is_number
from pytest_modelbench.scoring.backend import Backend
from pytest_modelbench.tasks.filters import filtered_answers
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
    requests = sum(len(doc.continuations) for doc in prepared.documents)
    values = checked_results(backend, backend.score_task(prepared), requests, "log-likelihood", _task(prepared))
    per_doc, start = [], 0
    for doc in prepared.documents:
        per_doc.append(values[start:start + len(doc.continuations)])
        start += len(doc.continuations)
        _check_finite(prepared, doc, per_doc[-1])
    return TaskEvaluation(prepared, per_doc, _score(prepared, metrics, per_doc))


class BlockScoring:
    """A task scored block by block (`blocks`: positions of its documents; gate/early_stop.py), one block a call to
    `score_next`. Each evaluation is of the documents scored so far, in the task's order, scored as evaluate_task
    scores them; after the last block it is the whole task's."""

    def __init__(self, prepared: PreparedTask, backend: Backend, blocks: Sequence[Sequence[int]]):
        self.prepared = prepared
        self.backend = backend
        self.blocks = blocks
        self._parts: list[tuple[Sequence[int], TaskEvaluation]] = []

    @property
    def blocks_left(self) -> int:
        return len(self.blocks) - len(self._parts)

    def score_next(self) -> TaskEvaluation:
        block = self.blocks[len(self._parts)]
        subset = dataclasses.replace(self.prepared, documents=[self.prepared.documents[i] for i in block])
        self._parts.append((block, evaluate_task(subset, self.backend)))
        return _merged(self.prepared, self._parts)


def _merged(prepared: PreparedTask, parts: Sequence[tuple[Sequence[int], TaskEvaluation]]) -> TaskEvaluation:
    """One evaluation of the documents of `parts`, in the task's order, scored over all of them at once (a metric
    or filter that reads every document sees them together, as in one evaluation)."""
    by_position = sorted(
        (int(position), part, i) for block, part in parts for i, position in enumerate(block)
    )
    documents = [prepared.documents[position] for position, _, _ in by_position]
    merged = dataclasses.replace(prepared, documents=documents)
    metrics = resolve_metrics(prepared.config)
    loglikelihoods = [part.loglikelihoods[i] for _, part, i in by_position]
    output_type = prepared.config.output_type
    if output_type == "generate_until":
        generations = [part.generations[i] for _, part, i in by_position]
        answers = filtered_answers(prepared.config.filters, generations, [doc.doc for doc in documents],
                                   [doc.doc_id for doc in documents], _task(prepared))
        return TaskEvaluation(merged, loglikelihoods, _score(merged, metrics, answers), generations, answers)
    if output_type == "loglikelihood":
        greedy = [part.greedy[i] for _, part, i in by_position]
        responses = [(values[0], flag) for values, flag in zip(loglikelihoods, greedy)]
        return TaskEvaluation(merged, loglikelihoods, _score(merged, metrics, responses), greedy=greedy)
    return TaskEvaluation(merged, loglikelihoods, _score(merged, metrics, loglikelihoods))


def _evaluate_generation(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    try:
        generations = checked_results(backend, backend.generate_task(prepared), len(prepared.documents), "generation",
                                      _task(prepared))
    except RequestError as exc:
        raise TaskConfigError(f"{_task(prepared)}: {exc.problem}") from None
    documents = prepared.documents  # each pipeline runs over all of them at once, as lm-eval's filters do
    answers = filtered_answers(prepared.config.filters, generations, [doc.doc for doc in documents],
                               [doc.doc_id for doc in documents], _task(prepared))
    scores = _score(prepared, metrics, answers)
    return TaskEvaluation(prepared, [[] for _ in prepared.documents], scores, generations, answers)


def _evaluate_rolling(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    """One value per document: its text's log-likelihood over lm-eval's rolling windows."""
    try:
        values = checked_results(backend, backend.rolling_loglikelihood_task(prepared), len(prepared.documents),
                                 "log-likelihood", _task(prepared))
    except RequestError as exc:
        raise TaskConfigError(f"{_task(prepared)}: {exc.problem}") from None
    per_doc = [[value] for value in values]
    for doc, values_of_doc in zip(prepared.documents, per_doc):
        _check_finite(prepared, doc, values_of_doc)
    return TaskEvaluation(prepared, per_doc, _score(prepared, metrics, per_doc))


def _evaluate_loglikelihood(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    """One response per document, as lm-eval's: its continuation's log-likelihood and whether it is greedy."""
    responses = list(backend.loglikelihood_task(prepared))
    checked_results(backend, [response[0] for response in responses], len(prepared.documents), "log-likelihood",
                    _task(prepared))
    for doc, (loglikelihood, _) in zip(prepared.documents, responses):
        _check_finite(prepared, doc, [loglikelihood])
    return TaskEvaluation(prepared, [[loglikelihood] for loglikelihood, _ in responses],
                          _score(prepared, metrics, responses), greedy=[greedy for _, greedy in responses])


def _score(prepared: PreparedTask, metrics, responses: Sequence[Any]) -> TaskScores:
    """Scores from each document's responses; with the task's own process_results, from the values it returns."""
    if prepared.config.process_results is not None:
        responses = [document_values(prepared.config, doc, response)
                     for doc, response in zip(prepared.documents, responses)]
    return score_task(prepared, metrics, responses)


def checked_results(backend: Backend, results: Any, requests: int, kind: str, where: str) -> list:
    """The values a backend returned for `requests` requests, refused unless there is one per request and each is of
    its `kind` ("log-likelihood": a number; "generation": text). A value too few or too many would shift the
    documents after it, or end in an IndexError or an empty argmax inside a metric."""
    try:
        values = list(results)
    except TypeError:
        values = None
    if values is None or len(values) != requests:
        got = _count(len(values), kind) if values is not None else f"a {type(results).__name__}"
        raise BackendError(f"{where}: {_backend_name(backend)} returned {got} for {_count(requests, 'request')}; a "
                           f"backend returns one {kind} per request, in order")
    for i, value in enumerate(values):
        if not (isinstance(value, str) if kind == "generation" else is_number(value)):
            raise BackendError(f"{where}: {_backend_name(backend)} returned {value!r} ({type(value).__name__}) as "
                               f"{kind} {i}, not {'text' if kind == 'generation' else 'a number'}")
    return values


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _backend_name(backend: Backend) -> str:
    return f"backend {type(backend).__name__} (model '{backend.describe().name}')"


def _task(prepared: PreparedTask) -> str:
    return f"{prepared.config.source}: task '{prepared.config.task}'"


def _check_finite(prepared: PreparedTask, doc: DocumentRequests, values: Sequence[float]) -> None:
    """A NaN or infinite log-likelihood would turn into a wrong accuracy (argmax of NaN) without a word."""
    for i, value in enumerate(values):
        if not math.isfinite(value):
            raise DocumentError(
                f"{_where(prepared, doc, i)}: the model gave a non-finite log-likelihood ({value}); "
                "with --dtype float16 or bfloat16 this is usually an overflow, try --dtype float32"
            )


def _where(prepared: PreparedTask, doc: DocumentRequests, choice: int) -> str:
    where = f"{_task(prepared)}, document {doc.doc_id}"
    if not doc.continuations:  # loglikelihood_rolling: the document's text is what was scored
        return where
    if not doc.choices:  # loglikelihood: one continuation, the target
        return f"{where}, continuation {doc.continuations[0]!r}"
    return f"{where}, choice {choice} ({doc.continuations[choice]!r})"
