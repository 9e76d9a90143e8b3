"""Generation around the persistent score cache: answers found in the cache are not generated again.

A cached answer must be the one a run without the cache would give, so its key holds everything the answer depends
on. The namespace (the backend's generation_cache_namespace) holds the model, the weights, the tokenizer, the model's
generation config and the backend's settings. Then the row's scope: the requests (context, stop sequences, token
budget, decoding settings) that the answer depends on, batch by batch, and the row's place among them.
- Greedy or beam decoding: the requests of the row's batch. Unbatched (batch size 1, a server) that is the row's own
  request, so the answer is reused by any run with that request (another --limit, another task with the same
  prompt). In a padded batch the other rows set the padding and the shapes, which can move near-tied tokens, so the
  batch as a whole is the scope.
- Sampling: every batch of the task, in order, since each batch draws from the random stream the batches before it
  left. A task is reused whole or generated whole (after an interrupted run, from the seed again).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Sequence

from pytest_modelbench.scoring.cached import WriteBack
from pytest_modelbench.scoring.progress import ScoringProgress

PROTOCOL_VERSION = "causal-generation/1"  # bump when a change in generation changes the answers
# generate(batches, on_done): answers the rows of `batches`, calling on_done(indices, answers) per batch.
Generate = Callable[[list[list[int]], Callable[[list[int], list[str]], None]], None]


def generation_keys(namespace: str, requests: Sequence[Any], batches: Sequence[Sequence[int]],
                    sampling: bool) -> list[bytes]:
    """One cache key per request (by index), for requests (anything JSON writes) generated in `batches`."""
    scopes = [list(batches)] if sampling else [[batch] for batch in batches]
    keys: list[bytes] = [b""] * len(requests)
    for scope in scopes:
        prompts = hashlib.sha256(json.dumps([[requests[i] for i in batch] for batch in scope], ensure_ascii=False,
                                            default=str).encode()).hexdigest()
        for place, i in enumerate(i for batch in scope for i in batch):
            keys[i] = hashlib.sha256(f"{namespace}\x00{prompts}\x00{place}".encode()).digest()
    return keys


def generate_with_cache(batches: Sequence[Sequence[int]], keys: Sequence[bytes] | None, cache,
                        progress: ScoringProgress, generate: Generate, *, whole: bool) -> list[str]:
    """Answers of the rows in `batches`: from the cache where every row of a batch is cached (`whole`: where every
    row of the task is), else from `generate`, whose answers are written to the cache as batches finish; None for a row
`generate` left unanswered (a request the backend could not score)."""
    answers: dict[int, str] = {}
    if keys is not None:
        found = cache.get_texts(keys)
        answers = {i: found[key] for i, key in enumerate(keys) if key in found}
    todo = [list(batch) for batch in batches if any(i not in answers for i in batch)]
    if whole and todo:
        todo = [list(batch) for batch in batches]
    generated = {i for batch in todo for i in batch}
    progress.requests_done([i for batch in batches for i in batch if i not in generated], computed=False)
    writes = WriteBack(cache.put_texts if keys is not None else lambda items: None)

    def on_done(indices: list[int], texts: list[str]) -> None:
        answers.update(zip(indices, texts))
        if keys is not None:
            writes.add([(keys[i], text) for i, text in zip(indices, texts)])
        progress.requests_done(indices)

    with writes:
        if todo:
            generate(todo, on_done)
    progress.finish()
    return [answers.get(i) for i in range(sum(len(batch) for batch in batches))]  # None: not generated
