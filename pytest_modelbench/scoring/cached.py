"""Scoring around the persistent score cache, the same for every scorer: cached values are read, the rest are
computed in batches, progress counts both, and computed values are written back every few seconds and when
scoring ends or is interrupted (so a re-run does not recompute them)."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

from pytest_modelbench.errors import BackendError
from pytest_modelbench.scoring.progress import ScoringProgress

FLUSH_INTERVAL_S = 5.0
# compute(todo, on_done): scores the requests at indices `todo`, calling on_done(positions in todo, values) per batch.
Compute = Callable[[list[int], Callable[[list[int], list[Any]], None]], None]


def cache_namespace(cache, fingerprint: str | None, model, tokenizer, **settings: Any) -> str | None:
    """The cache key's part for a model loaded here, the one place that says what identifies it: the fingerprint
    (loading.model_fingerprint: the checkpoint's files or hub commit, and the loading --model-args), the weights, the
    config and generation config as loaded, the tokenizer's state and the dtype; then the scorer's `settings`.
    scoring_namespace adds the protocol and the library versions. None when there is no cache or the model is not
    identified."""
    if cache is None or not getattr(cache, "enabled", False):
        return None
    if not fingerprint or fingerprint.endswith("@unknown"):
        return None
    from pytest_modelbench.scoring.score_cache import (
        config_fingerprint, scoring_namespace, tokenizer_fingerprint, weights_digest,
    )

    return scoring_namespace(
        model=fingerprint, weights=weights_digest(model), config=config_fingerprint(model),
        tokenizer=tokenizer_fingerprint(tokenizer), dtype=str(next(model.parameters()).dtype), **settings,
    )


class WriteBack:
    """Values computed but not yet in the cache: written every FLUSH_INTERVAL_S and by `close` (also when scoring is
    interrupted), so a re-run does not compute them again."""

    def __init__(self, put: Callable[[list[tuple[bytes, Any]]], None]):
        self.put = put
        self.pending: list[tuple[bytes, Any]] = []
        self.last_flush = time.monotonic()

    def add(self, items: Sequence[tuple[bytes, Any]]) -> None:
        self.pending.extend(items)
        if self.pending and time.monotonic() - self.last_flush > FLUSH_INTERVAL_S:
            self.close()
            self.last_flush = time.monotonic()

    def close(self) -> None:
        if self.pending:
            self.put(self.pending)
            self.pending = []

    def __enter__(self) -> "WriteBack":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def score_with_cache(n: int, keys: Sequence[bytes] | None, cache, progress: ScoringProgress,
                     compute: Compute) -> list[float]:
    """Values of `n` requests: those whose key (`keys`; None: no cache) is cached, the rest from `compute`; None
    where `compute` gave no value (a request the backend could not score: nothing of it is cached)."""
    results: list[float | None] = [None] * n
    if keys is not None:
        found = cache.get_many(keys)
        hits = [i for i, key in enumerate(keys) if key in found]
        for i in hits:
            results[i] = found[keys[i]]
        progress.requests_done(hits, computed=False)
    todo = [i for i, value in enumerate(results) if value is None]
    writes = WriteBack(cache.put_many if keys is not None else lambda items: None)

    def on_done(local: list[int], values: list[float]) -> None:
        if len(values) != len(local):  # a short batch would shift values onto other requests, and into the cache
            raise BackendError(f"a scoring batch of {len(local)} requests came back with {len(values)} values; "
                               "nothing of it was cached")
        indices = [todo[j] for j in local]
        for i, value in zip(indices, values):
            results[i] = value
        if keys is not None:  # a NaN is an error for the evaluation, never a score
            writes.add([(keys[i], value) for i, value in zip(indices, values) if math.isfinite(value)])
        progress.requests_done(indices)

    with writes:
        if todo:
            compute(todo, on_done)
    progress.finish()
    return results  # type: ignore[return-value]


def score_requests(requests: Sequence[tuple[str, str]], compute: Compute, *, namespace: str | None, cache,
                   progress: Callable[[str], None] | None, documents: Sequence[int] | None = None,
                   label: str = "scoring") -> list[float]:
    """score_with_cache for (context, continuation) requests keyed under `namespace` (None: no cache).
    `documents`: requests per document, in order, so progress counts documents; without it, requests."""
    from pytest_modelbench.scoring.score_cache import request_key

    if documents is None or sum(documents) != len(requests):
        documents, unit = [1] * len(requests), "requests"
    else:
        unit = "documents"
    keys = None if namespace is None else [request_key(namespace, context, cont) for context, cont in requests]
    return score_with_cache(len(requests), keys, cache, ScoringProgress(progress, label, documents, unit), compute)


def score_greedy_requests(requests: Sequence[tuple[str, str]], compute: Compute, *, namespace: str | None, cache,
                          progress: Callable[[str], None] | None, label: str = "scoring") -> list[tuple[float, bool]]:
    """Each request's (log-likelihood, is_greedy), from `compute` (its values are such pairs) or the cache, which
    holds the two as two values: the log-likelihood under the request's key (the key every output type's requests
    share) and the flag, 1.0 or 0.0, under `greedy_key` of it. A request missing either is scored again for both.
    Progress counts requests as documents (a loglikelihood task has one per document)."""
    from pytest_modelbench.scoring.score_cache import greedy_key, request_key

    keys = None
    if namespace is not None:
        keys = []
        for context, continuation in requests:
            key = request_key(namespace, context, continuation)
            keys += [key, greedy_key(key)]

    def compute_values(todo: list[int], on_done: Callable[[list[int], list[float]], None]) -> None:
        # value 2r is request r's log-likelihood, 2r + 1 its flag; `wanted` maps a request to (position in todo, part)
        wanted: dict[int, list[tuple[int, int]]] = {}
        for position, value_index in enumerate(todo):
            wanted.setdefault(value_index // 2, []).append((position, value_index % 2))
        scored = list(wanted)

        def pairs_done(local: list[int], pairs: list[tuple[float, bool]]) -> None:
            parts = [(position, float(pair[part]))
                     for j, pair in zip(local, pairs) for position, part in wanted[scored[j]]]
            on_done([position for position, _ in parts], [value for _, value in parts])

        compute(scored, pairs_done)

    values = score_with_cache(2 * len(requests), keys, cache, ScoringProgress(progress, label, [2] * len(requests)),
                              compute_values)
    return [(values[2 * r], values[2 * r + 1] == 1.0) for r in range(len(requests))]
