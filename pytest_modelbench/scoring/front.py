# Over 400 lines: the one front every backend is driven through, each output type side by side, treated alike.
"""The front every backend is driven through (the seam: scoring/backend.py): a prepared task's requests built in one
place, the score cache keyed and read, progress reported, the backend's values checked, a failed request named
by its document, and a request the run could not score (scoring/backend.py, `Unscored`) left in its place, never
cached: every task-level method returns one value per request, an `Unscored` where the backend could not score it.

`ScoringFront(backend, cache, progress)` is what the evaluation drives (backend.Backend); `TaskFront` gives a
backend class the same methods over itself, with the cache and progress sink it was built with.
"""

from __future__ import annotations

import json
import logging
import math
from itertools import accumulate
from typing import Any, Callable, Sequence

from pytest_modelbench.errors import (
    BackendError, BackendResultError, ModelbenchError, NonFiniteResultError, RequestError,
)
from pytest_modelbench.numeric import is_number
from pytest_modelbench.scoring.backend import (
    BackendInfo, BackendRaised, DocumentRequest, GenerationRequest, LoglikelihoodRequest, RollingRequest, Unscored,
    output_type_unsupported, retried_count, unscored_reason,
)
from pytest_modelbench.scoring.cached import score_greedy_requests, score_requests, score_with_cache
from pytest_modelbench.scoring.cached_generation import generate_with_cache, generation_keys
from pytest_modelbench.scoring.custom_backend import CheckedBackend
from pytest_modelbench.scoring.progress import ScoringProgress

Namer = Callable[[int], str]  # a request's index → where it is, for messages ("<task>, document 3, choice 1 (' b')")
LOG = logging.getLogger("pytest_modelbench")


def choice_requests(prepared) -> list[LoglikelihoodRequest]:
    """A multiple_choice task's requests: every choice of every document, documents in order."""
    return [LoglikelihoodRequest(doc.context, continuation)
            for doc in prepared.documents for continuation in doc.continuations]


def document_requests(prepared) -> list[DocumentRequest]:
    """A multiple_choice task's documents, for a backend that scores a document's choices together."""
    shared = prepared.config.masked_protocol == "pll_shared"
    return [DocumentRequest(doc.context, tuple(doc.continuations), shared) for doc in prepared.documents]


def target_requests(prepared) -> list[LoglikelihoodRequest]:
    """A loglikelihood task's requests: each document's one continuation, its target."""
    return [LoglikelihoodRequest(doc.context, doc.continuations[0]) for doc in prepared.documents]


def rolling_requests(prepared) -> list[RollingRequest]:
    """A loglikelihood_rolling task's requests: each document's text."""
    return [RollingRequest(doc.gold) for doc in prepared.documents]


def generation_requests(prepared) -> list[GenerationRequest]:
    """A generate_until task's requests: each document's context under the task's generation settings, once, or
    for a sampled task with `repeats` once per draw (adjacent, draws numbered 0..), seeded with the run's seed."""
    config = prepared.config
    return [GenerationRequest(doc.context, config.generation, prepared.sampling_seed, draw)
            for doc in prepared.documents for draw in range(config.draws)]


def task_name(prepared) -> str:
    return f"{prepared.config.source}: task '{prepared.config.task}'"


def backend_name(backend) -> str:
    kind = backend.kind if isinstance(backend, CheckedBackend) else type(backend).__name__
    return f"backend {kind} (model '{backend.describe().name}')"


class ScoringFront:
    def __init__(self, backend, cache=None, progress: Callable[[str], None] | None = None):
        self.backend = backend
        self.cache = cache
        self.progress = progress

    def describe(self) -> BackendInfo:
        return self.backend.describe()

    def retried_requests(self) -> int:
        return retried_count(self.backend)

    def score_task(self, prepared) -> list[float]:
        """A multiple_choice task: one log-likelihood per (document, choice), in order."""
        task = task_name(prepared)
        if hasattr(self.backend, "document_loglikelihoods"):
            per_document = self.document_values(
                document_requests(prepared), lambda d: f"{task}, document {prepared.documents[d].doc_id}",
                label=prepared.config.task)
            return [value for values in per_document for value in values]
        owners = [(doc, i) for doc in prepared.documents for i in range(len(doc.continuations))]

        def name(i: int) -> str:
            doc, choice = owners[i]
            return f"{task}, document {doc.doc_id}, choice {choice} ({doc.continuations[choice]!r})"

        try:
            return self.values(choice_requests(prepared), name, label=prepared.config.task,
                               documents=[len(doc.continuations) for doc in prepared.documents])
        except RequestError as exc:
            raise _document_error(exc, name) from None

    def loglikelihood(self, requests: Sequence[tuple[str, str]], *, documents: Sequence[int] | None = None,
                      label: str = "scoring") -> list[float]:
        """Loose (context, continuation) requests. `documents`: requests per document, in order (for progress);
        without it each request counts as one. A request the backend cannot score is a RequestError at its index."""
        requests = [LoglikelihoodRequest(context, continuation) for context, continuation in requests]
        values = self.values(requests, lambda i: f"{label}, request {i}", documents=documents, label=label)
        failed = next((i for i, value in enumerate(values) if isinstance(value, Unscored)), None)
        if failed is not None:  # a loose request has no document to leave unscored
            raise BackendError(f"{label}, request {failed}: {backend_name(self.backend)} could not score it: "
                               f"{values[failed].reason}")
        return values

    def loglikelihood_task(self, prepared) -> list[tuple[float, bool]]:
        """A loglikelihood task: per document its target's log-likelihood and whether the target is greedy."""
        method = getattr(self.backend, "greedy_loglikelihoods", None)
        if method is None:
            raise output_type_unsupported(prepared, type(self.backend).__name__)
        task, documents = task_name(prepared), prepared.documents
        requests = target_requests(prepared)

        def name(i: int) -> str:
            return f"{task}, document {documents[i].doc_id}, continuation {documents[i].continuations[0]!r}"

        failed: dict[int, Unscored] = {}

        def compute(todo: list[int], on_done: Callable[[list[int], list[Any]], None]) -> None:
            self._call(method, requests, todo, on_done, name, _is_greedy_pair, "a (log-likelihood, is_greedy) pair",
                       failed)

        try:
            pairs = score_greedy_requests([(r.context, r.continuation) for r in requests], compute,
                                          namespace=self._namespace("cache_namespace", False), cache=self.cache,
                                          progress=self.progress, label=prepared.config.task)
        except RequestError as exc:
            raise _document_error(exc, name) from None
        pairs = _with_failures(pairs, failed)
        self._check_finite([pair[0] for pair in pairs if not isinstance(pair, Unscored)], name)
        return pairs

    def rolling_loglikelihood_task(self, prepared) -> list[float]:
        """A loglikelihood_rolling task: per document its text's log-likelihood, cached by the text."""
        method = getattr(self.backend, "rolling_loglikelihoods", None)
        if method is None:
            raise output_type_unsupported(prepared, type(self.backend).__name__)
        from pytest_modelbench.scoring.score_cache import rolling_key

        task, documents, requests = task_name(prepared), prepared.documents, rolling_requests(prepared)
        namespace = self._namespace("cache_namespace", False)
        keys = None if namespace is None else [rolling_key(namespace, request.text) for request in requests]

        def name(i: int) -> str:
            return f"{task}, document {documents[i].doc_id}"

        failed: dict[int, Unscored] = {}

        def compute(todo: list[int], on_done: Callable[[list[int], list[Any]], None]) -> None:
            self._call(method, requests, todo, on_done, name, is_number, "a number", failed)

        progress = ScoringProgress(self.progress, prepared.config.task, [1] * len(requests))
        try:
            values = _with_failures(score_with_cache(len(requests), keys, self.cache, progress, compute), failed)
        except RequestError as exc:
            raise _document_error(exc, name) from None
        self._check_finite(values, name)
        return values

    def generate_task(self, prepared) -> list[str]:
        """A generate_until task: per document its answer, or its `repeats` draws one after the other (a sampled
        task's; config.draws). Answers are cached by the requests they depend on (scoring/cached_generation.py): the
        batch's, as `generation_batches` says, or when sampling the task's."""
        method = getattr(self.backend, "generate", None)
        if method is None:
            raise output_type_unsupported(prepared, type(self.backend).__name__)
        task, documents, requests = task_name(prepared), prepared.documents, generation_requests(prepared)
        batches_of = getattr(self.backend, "generation_batches", None)
        batches = [[i] for i in range(len(requests))] if batches_of is None else batches_of(requests)
        sampling = any(request.settings.sampling for request in requests)
        namespace = self._namespace("generation_cache_namespace")
        keys = None if namespace is None else generation_keys(
            namespace, [_cached_request(request) for request in requests], batches, sampling)

        draws = prepared.config.draws

        def name(i: int) -> str:
            drawn = f", draw {i % draws}" if draws > 1 else ""
            return f"{task}, document {documents[i // draws].doc_id}{drawn}"

        failed: dict[int, Unscored] = {}

        def generate(todo_batches: list[list[int]], on_done: Callable[[list[int], list[str]], None]) -> None:
            todo = [i for batch in todo_batches for i in batch]
            self._call(method, requests, todo, lambda positions, answers: on_done([todo[p] for p in positions],
                                                                                  answers), name, _is_text, "text",
                       failed)

        progress = ScoringProgress(self.progress, prepared.config.task, [1] * len(requests))
        try:
            return _with_failures(generate_with_cache(batches, keys, self.cache, progress, generate, whole=sampling),
                                  failed)
        except RequestError as exc:
            raise _document_error(exc, name) from None

    # --- the seam's calls -----------------------------------------------------------------------------------------

    def values(self, requests: Sequence[LoglikelihoodRequest], name: Namer, *, documents: Sequence[int] | None,
               label: str) -> list[float]:
        """`backend.loglikelihoods` over `requests`, cached ones read from the score cache, all checked finite; an
        `Unscored` where the backend could not score the request."""
        failed: dict[int, Unscored] = {}

        def compute(todo: list[int], on_done: Callable[[list[int], list[Any]], None]) -> None:
            self._call(self.backend.loglikelihoods, requests, todo, on_done, name, is_number, "a number", failed)

        values = score_requests([(r.context, r.continuation) for r in requests], compute,
                                namespace=self._namespace("cache_namespace", False), cache=self.cache,
                                progress=self.progress, documents=documents, label=label)
        values = _with_failures(values, failed)
        self._check_finite(values, name)
        return values

    def document_values(self, requests: Sequence[DocumentRequest], name: Namer, *, label: str) -> list[list[float]]:
        """`backend.document_loglikelihoods` over `requests`: per document, one value per continuation. The cache
        holds each continuation's value; a document with any of them missing is scored whole. `name` names a
        document; a document the backend cannot score is a DocumentError there."""
        sizes = [len(request.continuations) for request in requests]
        owners = [(d, c) for d, size in enumerate(sizes) for c in range(size)]
        starts = [0, *accumulate(sizes)][:-1]
        namespace = self._namespace("cache_namespace", any(request.shared_tokens for request in requests))
        keys = None
        if namespace is not None:
            from pytest_modelbench.scoring.score_cache import request_key

            keys = [request_key(namespace, requests[d].context, _cache_continuation(requests[d], c)) for d, c in owners]

        def choice_name(i: int) -> str:
            d, c = owners[i]
            return f"{name(d)}, choice {c} ({requests[d].continuations[c]!r})"

        failed: dict[int, Unscored] = {}

        def compute(todo: list[int], on_done: Callable[[list[int], list[Any]], None]) -> None:
            scored = sorted({owners[i][0] for i in todo})
            flat = [starts[d] + c for d in scored for c in range(sizes[d])]  # the scored documents' continuations
            wanted = {i: position for position, i in enumerate(todo)}
            relay = _Relay(len(flat), self, choice_name, lambda p: flat[p], is_number, "a number")

            def pass_on(fresh: list[tuple[int, Any]]) -> None:
                fresh = [(wanted[flat[p]], value) for p, value in fresh if flat[p] in wanted]
                if fresh:
                    on_done([position for position, _ in fresh], [value for _, value in fresh])

            try:
                rows = self.backend.document_loglikelihoods(
                    [requests[d] for d in scored], lambda positions, values: pass_on(relay.fresh(positions, values)))
            except RequestError as exc:
                if exc.index is None:
                    raise
                raise exc.named(name(scored[exc.index])) from None
            except Exception as exc:  # the backend's own: the run's failure, not a document's
                if isinstance(exc, ModelbenchError):
                    raise
                relay.raised(exc)
            else:
                rows = self._checked_count(rows, len(scored), lambda k: name(scored[k]))
                for k, (d, row) in enumerate(zip(scored, rows)):
                    if unscored_reason(row) is not None:  # the whole document: each continuation left unscored
                        rows[k] = [row] * sizes[d]
                        continue
                    if not isinstance(row, Sequence) or len(row) != sizes[d]:
                        raise BackendResultError(
                            f"{name(d)}: {backend_name(self.backend)} returned {_shown(row)} for a document of "
                            f"{sizes[d]} continuations; a backend returns one log-likelihood per continuation")
                values = [value for row in rows for value in row]
                pass_on(relay.fresh(range(len(values)), values))
            failed.update((flat[p], reason) for p, reason in relay.failed.items())

        values = score_with_cache(len(owners), keys, self.cache, ScoringProgress(self.progress, label, sizes), compute)
        values = _with_failures(values, failed)
        self._check_finite(values, choice_name)
        return [values[starts[d]:starts[d] + size] for d, size in enumerate(sizes)]

    def _call(self, method, requests, todo: list[int], on_done, name: Namer, usable, kind: str,
              failed: dict[int, Unscored]) -> None:
        """`method` over the requests at `todo`, its batches relayed to `on_done` once each, then the values it
        returned but never relayed; a RequestError's position becomes the request's index. The requests it could
        not score go to `failed` (request index → why), never to `on_done`; when it raises (scoring/backend.py), every
        request it had not relayed."""
        relay = _Relay(len(todo), self, name, lambda p: todo[p], usable, kind)

        def pass_on(fresh: list[tuple[int, Any]]) -> None:
            if fresh:
                on_done([position for position, _ in fresh], [value for _, value in fresh])

        try:
            returned = method([requests[i] for i in todo],
                              lambda positions, values: pass_on(relay.fresh(positions, values)))
        except RequestError as exc:
            if exc.index is None:
                raise
            raise exc.at(todo[exc.index]) from None
        except Exception as exc:  # the backend's own: the run's failure, not a document's
            if isinstance(exc, ModelbenchError):
                raise
            relay.raised(exc)
        else:
            returned = self._checked_count(returned, len(todo), lambda p: name(todo[p]))
            pass_on(relay.fresh(range(len(returned)), returned))
        failed.update((todo[p], reason) for p, reason in relay.failed.items())

    def _checked_count(self, returned: Any, count: int, name: Namer) -> list:
        try:
            values = list(returned)
        except TypeError:
            raise BackendResultError(f"{name(0)}: {backend_name(self.backend)} returned a {type(returned).__name__}, "
                                     "not one value per request") from None
        if len(values) != count:
            short = len(values) < count
            where, what = (name(len(values)), "none for this one on") if short else (name(count - 1), "this the last")
            raise BackendResultError(
                f"{where}: {backend_name(self.backend)} returned {len(values)} values for {count} requests ({what}); "
                "a backend returns one value per request, in order")
        return values

    def _check_finite(self, values: Sequence[Any], name: Namer) -> None:
        for i, value in enumerate(values):
            if not isinstance(value, Unscored) and not math.isfinite(value):
                raise NonFiniteResultError(
                    f"{name(i)}: the model gave a non-finite log-likelihood ({value}) through "
                    f"{backend_name(self.backend)}; with --dtype float16 or bfloat16 this is usually an overflow, "
                    "try --dtype float32")

    def _namespace(self, method: str, *args: Any) -> str | None:
        """The backend's `method` (cache_namespace, generation_cache_namespace); None without it or a cache."""
        found = getattr(self.backend, method, None)
        if found is None or self.cache is None or not getattr(self.cache, "enabled", False):
            return None
        return found(*args)


class _Relay:
    """A backend's values for `n` positions: each checked and passed on once, whether in a batch or at the end; the
    positions the backend could not score are kept in `failed` (position → why) and never passed on."""

    def __init__(self, n: int, front: ScoringFront, name: Namer, index: Callable[[int], int], usable, kind: str):
        self.passed = [False] * n
        self.failed: dict[int, Unscored] = {}
        self.front, self.name, self.index, self.usable, self.kind = front, name, index, usable, kind

    def fresh(self, positions: Sequence[int], values: Sequence[Any]) -> list[tuple[int, Any]]:
        positions, values = list(positions), list(values)
        backend = backend_name(self.front.backend)
        if len(positions) != len(values):
            raise BackendResultError(f"{backend} passed a batch of {len(positions)} positions with {len(values)} "
                                     "values; nothing of it was cached")
        fresh = []
        for position, value in zip(positions, values):
            if not (isinstance(position, int) and 0 <= position < len(self.passed)):
                raise BackendResultError(f"{backend} passed a value for position {position!r} of a call of "
                                         f"{len(self.passed)} requests")
            reason = unscored_reason(value)
            if reason is not None:
                if not self.passed[position]:
                    self.failed.setdefault(position, Unscored(reason))
                continue
            if not self.usable(value):
                raise BackendResultError(f"{self.name(self.index(position))}: {backend} returned {_shown(value)} "
                                         f"({type(value).__name__}), not {self.kind}")
            if not self.passed[position]:
                self.passed[position] = True
                self.failed.pop(position, None)  # a value after a failure (a re-send) wins
                fresh.append((position, value))
        return fresh

    def raised(self, exc: Exception) -> None:
        """The backend raised `exc` (scoring/backend.py): every position it had not passed on is unscored for it."""
        LOG.debug("%s raised while scoring", backend_name(self.front.backend), exc_info=exc)
        why = BackendRaised(f"the backend raised {type(exc).__name__}: {exc}")
        self.failed.update((position, why) for position, passed in enumerate(self.passed) if not passed)


class TaskFront:
    """The task-level methods of backend.Backend for a backend class, through ScoringFront over itself with its
    `cache` and `progress`."""

    cache = None
    progress: Callable[[str], None] | None = None

    def front(self) -> ScoringFront:
        return ScoringFront(self, self.cache, self.progress)

    def score_task(self, prepared) -> list[float]:
        return self.front().score_task(prepared)

    def loglikelihood(self, requests: Sequence[tuple[str, str]], *, documents: Sequence[int] | None = None,
                      label: str = "scoring") -> list[float]:
        return self.front().loglikelihood(requests, documents=documents, label=label)

    def loglikelihood_task(self, prepared) -> list[tuple[float, bool]]:
        return self.front().loglikelihood_task(prepared)

    def rolling_loglikelihood_task(self, prepared) -> list[float]:
        return self.front().rolling_loglikelihood_task(prepared)

    def generate_task(self, prepared) -> list[str]:
        return self.front().generate_task(prepared)


def _with_failures(values: list[Any], failed: dict[int, Unscored]) -> list[Any]:
    """`values` with an `Unscored` at each request the backend could not score (never cached, never computed)."""
    for i, why in failed.items():
        values[i] = why
    return values


def _document_error(exc: RequestError, name: Namer) -> ModelbenchError:
    if exc.index is None:
        return exc
    return exc.named(name(exc.index))


def _cached_request(request: GenerationRequest) -> list:
    """What an answer depends on besides the model: the request, as JSON writes it (a sampled one's seed and draw
    with it)."""
    settings = request.settings
    drawn = [request.seed, request.draw] if settings.sampling else []
    return [request.context, list(settings.until), settings.max_gen_toks, [list(item) for item in settings.decoding],
            *drawn]


def _cache_continuation(request: DocumentRequest, choice: int) -> str:
    """What a cached value depends on besides the context: with shared tokens, both continuations of the pair."""
    if request.shared_tokens:
        return json.dumps([list(request.continuations), choice], ensure_ascii=False)
    return request.continuations[choice]


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_greedy_pair(value: Any) -> bool:
    return (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2 and is_number(value[0])
            and isinstance(value[1], (bool, int)) and value[1] in (0, 1))


def _shown(value: Any, limit: int = 60) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."
