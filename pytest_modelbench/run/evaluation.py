"""One task, end to end: prepared documents → backend → per-document log-likelihoods → scores.

A document the backend could not score (scoring/backend.py, `Unscored`) is left out of the evaluation, which is of
the documents scored; its `integrity` (gate/integrity.py) counts what was left out, why, the answers no filter could
parse and the requests the backend re-sent, for the gate to judge before anything else."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

from pytest_modelbench.errors import BackendError, DocumentError, RequestError, TaskConfigError
from pytest_modelbench.gate.integrity import DocumentProblem, TaskIntegrity, combined
from pytest_modelbench.metrics.aggregate import TaskScores, score_task
from pytest_modelbench.metrics.process_results import document_values
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.numeric import is_number
from pytest_modelbench.scoring.backend import Backend, BackendRaised, Unscored, retried_count
from pytest_modelbench.tasks.filters import Answers, filtered_answers, invalid_outputs
from pytest_modelbench.tasks.requests import DocumentRequests
from pytest_modelbench.tasks.task import PreparedTask


@dataclass(frozen=True)
class TaskEvaluation:
    prepared: PreparedTask
    loglikelihoods: list[list[float]]  # per document, one per choice or continuation (none for generate_until)
    scores: TaskScores
    # generate_until: per document the raw generation, or a sampled task's `repeats` draws (a list of them)
    generations: list[str | list[str]] | None = None
    answers: list[Answers] | None = None  # generate_until: per document, the answer of each filter pipeline
    greedy: list[bool] | None = None  # loglikelihood: per document, whether its continuation is the greedy one
    integrity: TaskIntegrity | None = None  # what the run could not score or parse (gate/integrity.py)


def evaluate_task(prepared: PreparedTask, backend: Backend) -> TaskEvaluation:
    metrics = resolve_metrics(prepared.config)
    retried = retried_count(backend)
    if prepared.config.output_type == "generate_until":
        evaluation = _evaluate_generation(prepared, backend, metrics)
    elif prepared.config.output_type == "loglikelihood_rolling":
        evaluation = _evaluate_rolling(prepared, backend, metrics)
    elif prepared.config.output_type == "loglikelihood":
        evaluation = _evaluate_loglikelihood(prepared, backend, metrics)
    else:
        evaluation = _evaluate_choices(prepared, backend, metrics)
    integrity = dataclasses.replace(evaluation.integrity, retried=retried_count(backend) - retried)
    return dataclasses.replace(evaluation, integrity=integrity)


def _evaluate_choices(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    requests = sum(len(doc.continuations) for doc in prepared.documents)
    values = checked_results(backend, backend.score_task(prepared), requests, "log-likelihood", _task(prepared))
    per_doc, start = [], 0
    for doc in prepared.documents:
        per_doc.append(values[start:start + len(doc.continuations)])
        start += len(doc.continuations)
    failed = _failed(per_doc)
    scored, kept = _scored(prepared, failed)
    integrity = _integrity(prepared, failed, values)
    per_doc = [per_doc[d] for d in kept]
    for doc, values_of_doc in zip(scored.documents, per_doc):
        _check_finite(scored, doc, values_of_doc)
    return TaskEvaluation(scored, per_doc, _score(scored, metrics, per_doc), integrity=integrity)


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
        evaluation = evaluate_task(subset, self.backend)
        scored = {id(doc) for doc in evaluation.prepared.documents}  # a document left unscored is not in it
        self._parts.append(([i for i in block if id(self.prepared.documents[i]) in scored], evaluation))
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
    integrity = combined([part.integrity for _, part in parts])
    if output_type == "generate_until":
        generations = [part.generations[i] for _, part, i in by_position]
        answers = _answers(merged, generations)
        return TaskEvaluation(merged, loglikelihoods, _score(merged, metrics, answers), generations, answers,
                              integrity=_with_invalid(integrity, merged, generations, answers))
    if output_type == "loglikelihood":
        greedy = [part.greedy[i] for _, part, i in by_position]
        responses = [(values[0], flag) for values, flag in zip(loglikelihoods, greedy)]
        return TaskEvaluation(merged, loglikelihoods, _score(merged, metrics, responses), greedy=greedy,
                              integrity=integrity)
    return TaskEvaluation(merged, loglikelihoods, _score(merged, metrics, loglikelihoods), integrity=integrity)


def _evaluate_generation(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    draws = prepared.config.draws
    try:
        values = checked_results(backend, backend.generate_task(prepared), len(prepared.documents) * draws,
                                 "generation", _task(prepared))
    except RequestError as exc:
        raise TaskConfigError(f"{_task(prepared)}: {exc.problem}") from None
    per_doc = [values[d * draws:(d + 1) * draws] for d in range(len(prepared.documents))]
    failed = _failed(per_doc)  # a document any of whose draws is unscored
    scored, kept = _scored(prepared, failed)
    integrity = _integrity(prepared, failed, values)
    generations = [per_doc[d] if draws > 1 else per_doc[d][0] for d in kept]
    answers = _answers(scored, generations)
    scores = _score(scored, metrics, answers)
    return TaskEvaluation(scored, [[] for _ in scored.documents], scores, generations, answers,
                          integrity=_with_invalid(integrity, scored, generations, answers))


def _answers(scored: PreparedTask, generations: Sequence[str | list[str]]) -> list[Answers]:
    """Each document's answers (tasks/filters.py), every pipeline run over all the documents at once as lm-eval's
    filters are, on each document's `repeats` responses: its draws, or copies of its one generation."""
    config, documents = scored.config, scored.documents
    responses = [list(g) if isinstance(g, list) else [g] * config.repeats for g in generations]
    return filtered_answers(config.filters, responses, [doc.doc for doc in documents],
                            [doc.doc_id for doc in documents], _task(scored))


def _evaluate_rolling(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    """One value per document: its text's log-likelihood over lm-eval's rolling windows."""
    try:
        values = checked_results(backend, backend.rolling_loglikelihood_task(prepared), len(prepared.documents),
                                 "log-likelihood", _task(prepared))
    except RequestError as exc:
        raise TaskConfigError(f"{_task(prepared)}: {exc.problem}") from None
    failed = _failed([[value] for value in values])
    scored, kept = _scored(prepared, failed)
    per_doc = [[values[d]] for d in kept]
    for doc, values_of_doc in zip(scored.documents, per_doc):
        _check_finite(scored, doc, values_of_doc)
    return TaskEvaluation(scored, per_doc, _score(scored, metrics, per_doc),
                          integrity=_integrity(prepared, failed, values))


def _evaluate_loglikelihood(prepared: PreparedTask, backend: Backend, metrics) -> TaskEvaluation:
    """One response per document, as lm-eval's: its continuation's log-likelihood and whether it is greedy."""
    responses = list(backend.loglikelihood_task(prepared))
    checked_results(backend, [r if isinstance(r, Unscored) else r[0] for r in responses], len(prepared.documents),
                    "log-likelihood", _task(prepared))
    failed = _failed([[r] for r in responses])
    scored, kept = _scored(prepared, failed)
    integrity = _integrity(prepared, failed, responses)
    responses = [responses[d] for d in kept]
    for doc, (loglikelihood, _) in zip(scored.documents, responses):
        _check_finite(scored, doc, [loglikelihood])
    return TaskEvaluation(scored, [[loglikelihood] for loglikelihood, _ in responses],
                          _score(scored, metrics, responses), greedy=[greedy for _, greedy in responses],
                          integrity=integrity)


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
        if isinstance(value, Unscored):  # a request the run could not score: its document is left out
            continue
        if not (isinstance(value, str) if kind == "generation" else is_number(value)):
            raise BackendError(f"{where}: {_backend_name(backend)} returned {value!r} ({type(value).__name__}) as "
                               f"{kind} {i}, not {'text' if kind == 'generation' else 'a number'}")
    return values


def _failed(rows: Sequence[Sequence[Any]]) -> dict[int, str]:
    """The unscored documents among `rows` (each document's values), by position: why, the reason of the first of
    its values the backend could not score."""
    reasons = {d: next((v.reason for v in row if isinstance(v, Unscored)), None) for d, row in enumerate(rows)}
    return {d: why for d, why in reasons.items() if why is not None}


def _scored(prepared: PreparedTask, failed: dict[int, str]) -> tuple[PreparedTask, list[int]]:
    """The task of its scored documents, and their positions among all of them."""
    if not failed:
        return prepared, list(range(len(prepared.documents)))
    kept = [d for d in range(len(prepared.documents)) if d not in failed]
    return dataclasses.replace(prepared, documents=[prepared.documents[d] for d in kept]), kept


def _integrity(prepared: PreparedTask, failed: dict[int, str], values: Sequence[Any]) -> TaskIntegrity:
    """What of the task was left unscored (`failed`: document position → why), and why the backend raised when it
    did (the first `BackendRaised` among the backend's `values`)."""
    documents = prepared.documents
    raised = next((value.reason for value in values if isinstance(value, BackendRaised)), None)
    return TaskIntegrity(len(documents), _category_counts(documents),
                         tuple(DocumentProblem(int(documents[d].doc_id), documents[d].category, why)
                               for d, why in sorted(failed.items())),
                         tuple(documents[d].key for d in sorted(failed)), backend_failure=raised)


def _with_invalid(integrity: TaskIntegrity, scored: PreparedTask, generations: Sequence[str | list[str]],
                  answers: Sequence[Answers]) -> TaskIntegrity:
    """`integrity` with the scored documents' answers that no filter could parse (tasks/filters.py)."""
    flags = invalid_outputs(scored.config.filters, answers)
    if flags is None:
        return integrity
    invalid = tuple(DocumentProblem(int(doc.doc_id), doc.category,
                                    _shown(generation if isinstance(generation, str) else generation[0]))
                    for doc, generation, flag in zip(scored.documents, generations, flags) if flag)
    return dataclasses.replace(integrity, invalid=invalid, invalid_flags=tuple(flags))


def _category_counts(documents: Sequence[DocumentRequests]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for doc in documents:
        if doc.category is not None:
            counts[doc.category] = counts.get(doc.category, 0) + 1
    return counts


def _shown(text: str, limit: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 4] + "...'"


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
