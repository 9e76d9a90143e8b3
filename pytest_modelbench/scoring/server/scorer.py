"""The server backend: requests tokenized here exactly as the local causal path does (the tokenizer of `--model`,
lm-eval's seam rules), sent as token ids, and scored from the prompt log-probabilities the server echoes.

Truncation: a server scores a prompt of at most `max_model_len - 1` tokens (one position is kept for the token it
generates), so a request longer than that keeps its last `max_model_len - 1` tokens; that is the local path with
`max_length = max_model_len - 2`. Requests that fit (every request of the shipped suites) are scored on the same
tokens as lm-eval scores them.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

from pytest_modelbench.errors import RequestError, ServerError
from pytest_modelbench.scoring.backend import BackendInfo, RequestBackend, output_type_unsupported
from pytest_modelbench.scoring.causal import DEFAULT_MAX_LENGTH, CausalTokenizer
from pytest_modelbench.scoring.server import identity
from pytest_modelbench.scoring.server.client import CompletionsServer, ServedModel, ServerRefused, call_with_retries
from pytest_modelbench.scoring.server.pool import ServerPool

DEFAULT_PROMPTS_PER_REQUEST = 16  # --batch-size auto


class ServerScorer(RequestBackend):
    """A backend (scoring/backend.py) over one or more servers serving the same weights; build it with `connect`."""

    def __init__(self, pool: ServerPool, encoder: CausalTokenizer, *, prompt_limit: int, info: BackendInfo,
                 namespace: str | None, batch_size: int | str = 1, cache=None,
                 progress: Callable[[str], None] | None = None):
        self.pool = pool
        self.encoder = encoder
        self.prompt_limit = prompt_limit
        self.info = info
        self.namespace = namespace
        self.prompts_per_request = DEFAULT_PROMPTS_PER_REQUEST if batch_size == "auto" else int(batch_size)
        self.cache = cache if namespace is not None else None
        self.progress = progress

    def describe(self) -> BackendInfo:
        return self.info

    def generate_task(self, prepared) -> list[str]:
        raise output_type_unsupported(prepared, "scoring server (--server-url)")

    def rolling_loglikelihood_task(self, prepared) -> list[float]:
        raise output_type_unsupported(prepared, "scoring server (--server-url)")

    def loglikelihood_task(self, prepared) -> list[tuple[float, bool]]:
        raise output_type_unsupported(prepared, "scoring server (--server-url)")

    def loglikelihood(self, requests: Sequence[tuple[str, str]], *, documents: Sequence[int] | None = None,
                      label: str = "scoring") -> list[float]:
        from pytest_modelbench.scoring.cached import score_requests

        requests = list(requests)

        def compute(todo: list[int], on_done: Callable[[list[int], list[float]], None]) -> None:
            encoded = self.encoder.encode_pairs([requests[i] for i in todo])
            prompts = []
            for j, request in enumerate(encoded):
                try:
                    prompts.append(self._prompt(request.context, request.continuation))
                except RequestError as exc:
                    raise RequestError(exc.problem, todo[j]) from None
            step = self.prompts_per_request
            batches = [list(range(start, min(start + step, len(prompts)))) for start in range(0, len(prompts), step)]

            def batch_done(b: int, logprobs: list[list[float]]) -> None:
                values = [sum(lp[len(lp) - len(encoded[j].continuation):]) for j, lp in zip(batches[b], logprobs)]
                on_done(batches[b], values)

            self.pool.run([[prompts[j] for j in batch] for batch in batches], batch_done)

        return score_requests(requests, compute, namespace=self.namespace, cache=self.cache,
                              progress=self.progress, documents=documents, label=label)

    def _prompt(self, context: tuple[int, ...], continuation: tuple[int, ...]) -> list[int]:
        if not continuation:
            raise RequestError("the continuation is empty after tokenization")
        if len(continuation) >= self.prompt_limit:
            raise RequestError(
                f"the continuation has {len(continuation)} tokens; the server scores prompts of at most "
                f"{self.prompt_limit} tokens"
            )
        return list((context + continuation)[-self.prompt_limit:])


def connect(urls: Sequence[str], *, tokenizer, name: str, served_model: str | None = None, concurrency: int = 8,
            timeout_s: float = 300.0, retries: int = 4, batch_size: int | str = 1, cache=None,
            progress: Callable[[str], None] | None = None, scorer_kwargs: dict[str, Any] | None = None) -> ServerScorer:
    """Ask each server what it serves, probe its weights, and build the backend; a ServerError names what is wrong."""
    settings = dict(scorer_kwargs or {})
    servers = [CompletionsServer(url, timeout_s) for url in urls]
    served = [_served(server, served_model, retries) for server in servers]
    model = served[0].id
    encoder = CausalTokenizer(tokenizer, settings.get("prefix_token_id"), settings.get("add_bos_token"))
    limits = [s.max_model_len - 1 for s in served if s.max_model_len]
    prompt_limit = min(limits) if limits else DEFAULT_MAX_LENGTH + 1
    if "max_length" in settings:
        prompt_limit = min(prompt_limit, settings["max_length"] + 1)

    names = [s.id for s in served]  # each server's own name for the checkpoint
    probed = [_probe(server, served_name, encoder, retries) for server, served_name in zip(servers, names)]
    probes = [values for values, _ in probed]
    if batch_size != 1 and not all(several for _, several in probed):
        warnings.warn(f"pytest-modelbench: a scoring server refused several prompts in one request; sending one "
                      f"prompt per request (--batch-size {batch_size} ignored)", stacklevel=2)
        batch_size = 1
    for server, served_name, probe in zip(servers[1:], names[1:], probes[1:]):
        if not identity.same_weights(probes[0], probe):
            raise ServerError(f"servers {servers[0]} ('{model}') and {server} ('{served_name}') score the identity "
                              "probe differently: they serve different weights; give servers of one checkpoint")
    from pytest_modelbench.scoring.score_cache import scoring_namespace, tokenizer_fingerprint

    tokenizer_id = tokenizer_fingerprint(tokenizer)
    enabled = cache is not None and getattr(cache, "enabled", False)
    registry = cache.path.parent / identity.REGISTRY_FILE if enabled else None
    weights = identity.fingerprint(probes[0], tokenizer_id, registry)
    fingerprint = f"server:{model}@{weights}"
    where = ", ".join(str(s) for s in servers)
    info = BackendInfo(name, fingerprint, "causal", "", f"server {where} (serving {model}, "
                       f"max_model_len {served[0].max_model_len})", settings)
    namespace = scoring_namespace(
        model=fingerprint, tokenizer=tokenizer_id, prompt_limit=prompt_limit,
        prefix_token_id=encoder.prefix_token_id, add_bos_token=encoder.add_bos_token, path="server",
    ) if enabled else None
    pool = ServerPool(servers, names, concurrency=concurrency, retries=retries)
    return ServerScorer(pool, encoder, prompt_limit=prompt_limit, info=info, namespace=namespace,
                        batch_size=batch_size, cache=cache, progress=progress)


def _served(server: CompletionsServer, wanted: str | None, retries: int) -> ServedModel:
    models = call_with_retries(server.served_models, retries)
    ids = [m.id for m in models]
    if wanted is not None:
        if wanted not in ids:
            raise ServerError(f"server {server} does not serve '{wanted}' (it serves: {', '.join(ids) or 'nothing'})")
        return models[ids.index(wanted)]
    if len(models) != 1:
        raise ServerError(f"server {server} serves {len(models)} models ({', '.join(ids) or 'none'}); "
                          "choose one with --server-model")
    return models[0]


def _probe(server: CompletionsServer, model: str, encoder: CausalTokenizer, retries: int) -> tuple[list[float], bool]:
    """The probe's log-probabilities, and whether the server takes several prompts in one request (the probe is
    sent as one request first, then prompt by prompt if the server refuses that)."""
    prompts = identity.probe_prompts(encoder.encode)
    try:
        logprobs = call_with_retries(lambda: server.prompt_logprobs(model, prompts), retries)
        several = True
    except ServerError as exc:
        if not isinstance(exc, ServerRefused):
            raise
        logprobs = [call_with_retries(lambda p=p: server.prompt_logprobs(model, [p]), retries)[0] for p in prompts]
        several = False
    return [value for values in logprobs for value in values], several
