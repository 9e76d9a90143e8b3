"""The server backend: requests tokenized here exactly as the local causal path does (the tokenizer of `--model`,
lm-eval's seam rules), sent as token ids, and scored from the prompt log-probabilities the server echoes.

Per output type:
- multiple_choice (and loose requests): each (context, continuation) as one prompt; the continuation's echoed
  log-probabilities summed.
- loglikelihood_rolling: lm-eval's rolling windows (scoring/rolling.py) cut here, each window one prompt; a document's
  value is the sum over its windows. The front caches each text's value, as it does the local path's.
- generate_until: each context (left-truncated as the local path truncates it) sent as token ids with lm-eval's stops
  (the task's `until` plus the end-of-sequence text), `max_gen_toks` as `max_tokens` and the task's decoding settings
  (greedy: temperature 0; sampled: its temperature, top_p, top_k, min_p and the run's seed per request, plus the
  draw's number for a document's `repeats` draws). The answer is the generated token ids decoded here (special tokens
  skipped) and cut before the first stop, which is the local path's answer for the same tokens; the server's own
  text must agree with it, the stops and the budget must have been honoured (check_generation), and a setting a
  server cannot be asked for is refused (server_decoding).
  Answers are cached under the servers' probed identity and a probe of their greedy generations, so a checkpoint or
  a generation config that generates differently is generated again.
- loglikelihood (is_greedy): not supported on a server yet (a named error).

Truncation: a server scores a prompt of at most `max_model_len - 1` tokens (one position is kept for the token it
generates), so a request longer than that keeps its last `max_model_len - 1` tokens; that is the local path with
`max_length = max_model_len - 2`, and the same `max_length` cuts rolling windows and generation contexts
(`max_length - max_gen_toks` tokens). Requests that fit (every request of the shipped suites) are scored on the same
tokens as lm-eval scores them.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from typing import Any, Callable, Sequence

from pytest_modelbench.errors import RequestError, ServerAnswerError, ServerError
from pytest_modelbench.scoring.backend import (
    BackendInfo, GenerationRequest, LoglikelihoodRequest, OnBatch, RollingRequest, Unscored, output_type_unsupported,
)
from pytest_modelbench.scoring.causal import DEFAULT_MAX_LENGTH
from pytest_modelbench.scoring.front import TaskFront
from pytest_modelbench.scoring.server import identity
from pytest_modelbench.scoring.server.client import (
    CompletionsServer, Generated, ServedModel, ServerRefused, call_with_retries,
)
from pytest_modelbench.scoring.server.pool import ServerPool
from pytest_modelbench.scoring.tokenization import CausalTokenizer

DEFAULT_PROMPTS_PER_REQUEST = 16  # --batch-size auto
GENERATION_PROTOCOL = "server-generation/1"  # bump when a change here changes the answers
GENERATION_PROBE_TOKENS = 8  # greedy tokens generated after each probe text (the generation identity)
# The task's decoding settings (tasks/generation_settings.py, transformers' names) as /v1/completions parameters.
SERVER_DECODING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                   "repetition_penalty": "repetition_penalty", "min_new_tokens": "min_tokens"}
# transformers' generate samples with these unless the task sets them; a server's own defaults may differ, so they
# are sent.
SAMPLING_DEFAULTS = {"top_k": 50, "top_p": 1.0}
NO_OP_DECODING = {"num_beams": 1, "repetition_penalty": 1.0, "length_penalty": 1.0, "no_repeat_ngram_size": 0}


class ServerScorer(TaskFront):
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
        self._generation_identity: str | None = None
        # the last generate call's generated token ids, by position in its requests: diagnostics
        self.last_token_ids: dict[int, tuple[int, ...]] = {}

    def describe(self) -> BackendInfo:
        return self.info

    def retried_requests(self) -> int:
        """The seam's: HTTP requests re-sent after a transient failure, so far (scoring/server/pool.py)."""
        return self.pool.retried

    @property
    def max_length(self) -> int:
        """The local path's `max_length` that this server's window matches (module docstring)."""
        return self.prompt_limit - 1

    def generate(self, requests: Sequence[GenerationRequest], on_batch: OnBatch | None = None) -> list[str]:
        """The seam: each context one prompt, answered on its own (module docstring); `prompts_per_request` prompts
        to an HTTP request."""
        from pytest_modelbench.scoring.generation import context_limit, stop_sequences

        self.generation_identity()  # servers of one run must generate alike
        answers: list[str | Unscored] = [""] * len(requests)
        self.last_token_ids = {}
        # A server seeds each prompt of a request alike: a document's draws go out under seeds of their own.
        by_settings: dict = {}
        for i, request in enumerate(requests):
            by_settings.setdefault((request.settings, request.seed + request.draw), []).append(i)
        for (settings, seed), rows in by_settings.items():
            decoding = server_decoding(settings, seed)
            stops = stop_sequences(self.encoder.tokenizer, settings)
            limit = context_limit(self.max_length, settings)
            contexts = {i: self.encoder.encode(requests[i].context)[-limit:] for i in rows}
            step = self.prompts_per_request
            batches = [rows[start:start + step] for start in range(0, len(rows), step)]

            def request(server: CompletionsServer, model: str, prompts, settings=settings, stops=stops,
                        decoding=decoding) -> list[Generated]:
                return server.generate(model, prompts, max_tokens=settings.max_gen_toks, stop=stops,
                                       settings=decoding)

            def batch_done(k: int, generated: list[Generated], batches=batches, settings=settings,
                           stops=stops) -> None:
                # checked here, on the calling thread, as each batch comes back
                self.last_token_ids.update((i, g.ids) for i, g in zip(batches[k], generated))
                texts = [check_generation(self.encoder.tokenizer, g, stops, settings.max_gen_toks, i)
                         for g, i in zip(generated, batches[k])]
                for i, text in zip(batches[k], texts):
                    answers[i] = text
                if on_batch is not None:
                    on_batch(batches[k], texts)

            def batch_failed(k: int, why: str, batches=batches) -> None:
                for i in batches[k]:
                    answers[i] = Unscored(why)
                if on_batch is not None:
                    on_batch(batches[k], [answers[i] for i in batches[k]])

            self.pool.run([[contexts[i] for i in batch] for batch in batches], batch_done, request=request,
                          on_failed=batch_failed)
        return answers

    def rolling_loglikelihoods(self, requests: Sequence[RollingRequest], on_batch: OnBatch | None = None
                               ) -> list[float]:
        """The seam: each text's log-likelihood over lm-eval's rolling windows, each window one prompt."""
        from pytest_modelbench.scoring.rolling import WindowTotals, text_windows

        per_text = text_windows(self.encoder, [request.text for request in requests], self.max_length)
        windows = [window for text in per_text for window in text]
        totals = WindowTotals(per_text, on_batch)
        step = self.prompts_per_request
        batches = [list(range(start, min(start + step, len(windows)))) for start in range(0, len(windows), step)]

        def batch_done(b: int, logprobs: list[list[float]]) -> None:
            totals.windows_done(batches[b], [sum(lp[len(lp) - len(windows[j].continuation):])
                                             for j, lp in zip(batches[b], logprobs)])

        self.pool.run([[list(windows[j].context + windows[j].continuation) for j in batch] for batch in batches],
                      batch_done, on_failed=lambda b, why: totals.windows_failed(batches[b], why))
        return totals.totals()

    def generation_cache_namespace(self) -> str | None:
        """The seam's: the servers' identity, their greedy generations' and the window."""
        if self.namespace is None:
            return None
        return json.dumps({"protocol": GENERATION_PROTOCOL, "scoring": self.namespace,
                           "generation_probe": self.generation_identity(), "max_length": self.max_length},
                          sort_keys=True)

    def generation_identity(self) -> str:
        """A digest of every server's greedy generation after the probe texts; servers of one run must agree. The
        log-probability probe identifies the weights; this also tells a server whose generation config (its
        defaults for what a request does not set) makes it generate otherwise."""
        if self._generation_identity is None:
            prompts = identity.probe_prompts(self.encoder.encode)
            # one request, or one per prompt for a server that takes one prompt per request (connect)
            groups = [prompts] if self.prompts_per_request > 1 else [[p] for p in prompts]
            answers = []
            for server, model in zip(self.pool.servers, self.pool.models):
                answers.append([list(g.ids) for group in groups for g in call_with_retries(
                    lambda s=server, m=model, group=group: s.generate(
                        m, group, max_tokens=GENERATION_PROBE_TOKENS, stop=[], settings={"temperature": 0.0}),
                    self.pool.retries)])
            for server, answer in zip(self.pool.servers[1:], answers[1:]):
                if answer != answers[0]:
                    raise ServerError(
                        f"servers {self.pool.servers[0]} and {server} generate differently after the identity probe "
                        "(greedy, same prompts): they serve different weights or generation settings; give servers "
                        "of one checkpoint and one configuration"
                    )
            self._generation_identity = "gen:" + hashlib.sha256(json.dumps(answers[0]).encode()).hexdigest()[:16]
        return self._generation_identity

    def loglikelihood_task(self, prepared) -> list[tuple[float, bool]]:
        raise output_type_unsupported(prepared, "scoring server (--server-url)")

    def cache_namespace(self, shared_tokens: bool) -> str | None:
        """The seam's: the servers' probed identity and the settings, the same for every request."""
        return self.namespace

    def loglikelihoods(self, requests: Sequence[LoglikelihoodRequest],
                       on_batch: OnBatch | None = None) -> list[float]:
        """The seam (scoring/backend.py): each request one prompt, `prompts_per_request` prompts to an HTTP request."""
        encoded = self.encoder.encode_pairs([(r.context, r.continuation) for r in requests])
        prompts = []
        for j, request in enumerate(encoded):
            try:
                prompts.append(self._prompt(request.context, request.continuation))
            except RequestError as exc:
                raise RequestError(exc.problem, j) from None
        step = self.prompts_per_request
        batches = [list(range(start, min(start + step, len(prompts)))) for start in range(0, len(prompts), step)]
        values: list[float | Unscored] = [0.0] * len(prompts)

        def batch_done(b: int, logprobs: list[list[float]]) -> None:
            batch = [sum(lp[len(lp) - len(encoded[j].continuation):]) for j, lp in zip(batches[b], logprobs)]
            for j, value in zip(batches[b], batch):
                values[j] = value
            if on_batch is not None:
                on_batch(batches[b], batch)

        def batch_failed(b: int, why: str) -> None:
            for j in batches[b]:
                values[j] = Unscored(why)
            if on_batch is not None:
                on_batch(batches[b], [values[j] for j in batches[b]])

        self.pool.run([[prompts[j] for j in batch] for batch in batches], batch_done, on_failed=batch_failed)
        return values

    def _prompt(self, context: tuple[int, ...], continuation: tuple[int, ...]) -> list[int]:
        if not continuation:
            raise RequestError("the continuation is empty after tokenization")
        if len(continuation) >= self.prompt_limit:
            raise RequestError(
                f"the continuation has {len(continuation)} tokens; the server scores prompts of at most "
                f"{self.prompt_limit} tokens"
            )
        return list((context + continuation)[-self.prompt_limit:])


def server_decoding(settings, seed: int) -> dict[str, Any]:
    """The task's decoding settings as /v1/completions parameters, sampling with `seed`; a setting that has none is
    refused, a RequestError for every request (a server would ignore it or do something else, and the answers would
    silently be other than the task asks for)."""
    decoding = dict(settings.decoding)
    sampling = decoding.pop("do_sample", False) is True
    params: dict[str, Any] = {}
    for key, value in sorted(decoding.items()):
        if key in SERVER_DECODING:
            params[SERVER_DECODING[key]] = value
        elif key in NO_OP_DECODING and value == NO_OP_DECODING[key]:
            continue
        else:
            raise RequestError(
                f"generation_kwargs.{key} = {value!r} cannot be sent to a scoring server (--server-url): "
                f"/v1/completions has no such setting ({', '.join(sorted(SERVER_DECODING))} and do_sample are "
                "sent); run the task on a local model, or drop the setting"
            )
    if not sampling:
        params["temperature"] = 0.0  # greedy: the argmax at every step, as transformers' greedy search
        return params
    return {**SAMPLING_DEFAULTS, **params, "seed": seed}


def check_generation(tokenizer, generated: Generated, stops: Sequence[str], max_tokens: int, position: int) -> str:
    """The answer to one prompt, from the generated token ids decoded here exactly as the local path decodes them
    (special tokens skipped, cut before the first stop); refused (a ServerAnswerError at the request's `position`)
    unless the server stopped where the local path would have (not past a stop or the end-of-sequence token, not
    before the budget without a reason) and its text is the decoding of its ids."""
    from pytest_modelbench.scoring.generation import cut_at_stops

    ids = list(generated.ids)
    server = f"server {generated.server}"
    stops = [stop for stop in stops if stop]
    eos = tokenizer.eos_token_id
    if eos is not None and eos in ids[:-1]:
        raise ServerAnswerError(server, f"generated past the end-of-sequence token (position {ids.index(eos)} of "
                                f"{len(ids)}): it does not stop at end of sequence", position)
    before_last = tokenizer.decode(ids[:-1], skip_special_tokens=True)
    passed = next((stop for stop in stops if stop in before_last), None)
    if passed is not None:
        raise ServerAnswerError(server, f"generated past the stop sequence {passed!r} (it is in the text before the "
                                f"last of {len(ids)} tokens): it did not take the task's stops (`until`)", position)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    stopped = bool(ids) and (ids[-1] in tokenizer.all_special_ids or any(stop in text for stop in stops))
    if len(ids) < max_tokens and not stopped:
        raise ServerAnswerError(server, f"the generation ends after {len(ids)} of {max_tokens} tokens with no stop "
                                f"sequence or end-of-sequence token (finish_reason {generated.finish_reason!r}): "
                                "truncated", position)
    answer = cut_at_stops(text, stops)
    served = cut_at_stops(generated.text, stops)
    if served != answer and served != answer.rstrip("\ufffd"):  # a server may hold back an incomplete character
        raise ServerAnswerError(server, f"returned the text {_shown(generated.text)} for token ids that decode to "
                                f"{_shown(text)}: its text is not its tokens", position)
    return answer


def _shown(text: str, limit: int = 80) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


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
