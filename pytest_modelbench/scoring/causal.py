"""Log-likelihoods of (context, continuation) pairs under a causal LM, tokenized and scored as lm-eval's HFLM does.

Two paths:
- plain (`fast=False`, the default of this class): lm-eval's own procedure, one row per request, sorted longest
  first, right-padded with id 0, full logits. The reference: on the same machine, batch size and thread count its numbers
  are lm-eval's, bit for bit.
- fast (`fast=True`, what pytest runs use unless `--plain-scoring`, run/runner.py): shared token prefixes computed
  once, the vocabulary projection only at scored positions (scoring/prefix_sharing.py). The same log-likelihoods up to float rounding: a different
  order of the same sums, so differences of the size lm-eval shows between batch sizes, amplified on some models (on
  SmolLM2-135M float32: typically < 1e-5, up to 3e-4 on a few short CrowS-Pairs sentences). Requests that would be
  left-truncated, and models that fail the fast path's numerical probe, go down the plain path.

Optional: a persistent score cache (scoring/score_cache.py) and progress lines (scoring/progress.py).
"""

from __future__ import annotations

import json
import warnings
from functools import cached_property
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from pytest_modelbench.errors import RequestError
from pytest_modelbench.scoring.backend import (
    BackendInfo, GenerationRequest, LoglikelihoodRequest, OnBatch, RollingRequest,
)
from pytest_modelbench.scoring.front import TaskFront
from pytest_modelbench.scoring.placement import compute_devices, input_device, placement_description, placement_label
from pytest_modelbench.scoring.rolling import WindowTotals, text_windows
from pytest_modelbench.scoring.tokenization import CausalTokenizer, EncodedRequest

DEFAULT_MAX_LENGTH = 2048
MAX_AUTO_BATCH = 64


def resolve_max_length(model, tokenizer) -> int:
    """lm-eval's order: n_positions, max_position_embeddings, n_ctx, tokenizer.model_max_length, 2048."""
    config = getattr(model.config, "text_config", None) or model.config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and model_max < 1e29:  # transformers' "infinite" sentinel is ~1e30
        return model_max
    return DEFAULT_MAX_LENGTH


class CausalLMScorer(TaskFront):
    """Sums log P(continuation | context) for each request.

    `fast=False` (default) is the reference path (lm-eval's procedure); `fast=True` shares token prefixes (see the
    module docstring). `batch_size` and `generation_batch_size` (an integer or 'auto', sized from free memory) come
    decided (run/runner.py, batch_size_for); 1 is lm-eval's. `cache` (a ScoreCache) with `fingerprint` (the model's,
    LoadedModel.fingerprint) reuses scores from earlier runs; `progress` (a line sink) reports long scoring.
    A backend (the seam: scoring/backend.py; the front, scoring/front.py, keys the cache and reports progress for
    the requests it sends); `name` is what --model called the model.
    """

    def __init__(self, model, tokenizer, *, batch_size: int | str = 1, generation_batch_size: int | str = 1,
                 prefix_token_id: int | None = None, add_bos_token: bool | None = None, max_length: int | None = None,
                 fast: bool = False, cache=None, fingerprint: str | None = None,
                 progress: Callable[[str], None] | None = None, name: str = ""):
        self.name = name
        self.explicit_settings = {key: value for key, value in (
            ("prefix_token_id", prefix_token_id), ("add_bos_token", add_bos_token), ("max_length", max_length),
        ) if value is not None}
        self.model = model.eval()
        self.device = input_device(model)
        self.encoder = CausalTokenizer(tokenizer, prefix_token_id, add_bos_token)
        self.max_length = max_length or resolve_max_length(model, tokenizer)
        self.batch_size = batch_size
        self.generation_batch_size = generation_batch_size
        self.fast = fast
        self.cache = cache
        self.fingerprint = fingerprint
        self.progress = progress
        self.last_stats = None  # FastStats of the last fast call (benchmarks read it)
        self._runner = None
        self._fast_checked = False
        self._namespace: str | None = None

    def describe(self) -> BackendInfo:
        return BackendInfo(self.name, self.fingerprint or "", "causal", weights_dtype(self.model),
                           placement_description(self.model), dict(self.explicit_settings))

    def generate(self, requests: Sequence[GenerationRequest], on_batch: OnBatch | None = None) -> list[str]:
        """The seam: answers (scoring/generation.py), requests of one settings together in lm-eval's batches."""
        from pytest_modelbench.scoring.generation import generate_batches

        contexts, plan = self._generation_plan(requests)
        answers = [""] * len(requests)

        def done(indices: list[int], texts: list[str]) -> None:
            for i, text in zip(indices, texts):
                answers[i] = text
            if on_batch is not None:
                on_batch(indices, texts)

        for (settings, seed), batches in plan:
            generate_batches(self.model, self.encoder.tokenizer, self.device, contexts, settings, batches, done, seed)
        return answers

    def generation_batches(self, requests: Sequence[GenerationRequest]) -> list[list[int]]:
        """The seam: `generate`'s batches (a padded batch's answers depend on each other)."""
        return [batch for _, batches in self._generation_plan(requests)[1] for batch in batches]

    def _generation_plan(self, requests: Sequence[GenerationRequest]) -> tuple[list[list[int]], list[tuple]]:
        """Each request's context as generated (token ids, cut on the left to leave room for the answer) and, per
        settings and seed, lm-eval's batches: longest untruncated context first, ties by context text (a document's
        draws stay adjacent, in order)."""
        from pytest_modelbench.scoring.generation import batch_plan, context_limit

        encoded = [self.encoder.encode(request.context) for request in requests]
        contexts: list[list[int]] = [[] for _ in requests]
        by_settings: dict = {}
        for i, request in enumerate(requests):
            by_settings.setdefault((request.settings, request.seed), []).append(i)
        plan = []
        for (settings, seed), members in by_settings.items():
            limit = context_limit(self.max_length, settings)
            for i in members:
                contexts[i] = encoded[i][-limit:]
            batch_size = self._resolve_batch_size(max(len(contexts[i]) for i in members) + settings.max_gen_toks,
                                                  self.generation_batch_size)
            local = batch_plan([len(encoded[i]) for i in members], [requests[i].context for i in members], batch_size)
            plan.append(((settings, seed), [[members[k] for k in batch] for batch in local]))
        return contexts, plan

    def rolling_loglikelihoods(self, requests: Sequence[RollingRequest], on_batch: OnBatch | None = None
                               ) -> list[float]:
        """The seam: each text's log-likelihood, summed over lm-eval's rolling windows (scoring/rolling.py)."""
        per_text = text_windows(self.encoder, [request.text for request in requests], self.max_length)
        totals = WindowTotals(per_text, on_batch)
        self.score_encoded([window for windows in per_text for window in windows], on_done=totals.windows_done)
        return totals.totals()

    def loglikelihoods(self, requests: Sequence[LoglikelihoodRequest],
                       on_batch: OnBatch | None = None) -> list[float]:
        """The seam (scoring/backend.py): log-likelihoods of (context, continuation) requests."""
        return self.score_encoded(self.encoder.encode_pairs([(r.context, r.continuation) for r in requests]),
                                  on_done=on_batch)

    def greedy_loglikelihoods(self, requests: Sequence[LoglikelihoodRequest],
                              on_batch: OnBatch | None = None) -> list[tuple[float, bool]]:
        """The seam: per request its log-likelihood and whether every continuation token is the argmax at its
        position (lm-eval's is_greedy), both from one plain-path forward. Shared prefixes would save little here: a
        loglikelihood task's contexts have one continuation each."""
        rows = self._model_inputs(self.encoder.encode_pairs([(r.context, r.continuation) for r in requests]))
        return self._score_plain(rows, list(range(len(rows))), on_batch, forward=self._forward_greedy)

    def score_encoded(self, encoded: Sequence[EncodedRequest],
                      on_done: Callable[[list[int], list[float]], None] | None = None) -> list[float]:
        """Log-likelihoods of encoded requests; `on_done(indices, values)` is called as batches complete."""
        rows = self._model_inputs(encoded)
        self.last_stats = None
        runner = self._fast_runner() if self.fast and rows else None
        if runner is None:
            return self._score_plain(rows, list(range(len(rows))), on_done)
        results = [0.0] * len(rows)
        fits = [len(req.context) + len(req.continuation) <= self.max_length + 1 for req in encoded]
        fast = [i for i, ok in enumerate(fits) if ok]
        truncated = [i for i, ok in enumerate(fits) if not ok]  # lm-eval cuts these on the left: plain path

        def relay(indices: list[int], local: list[int], values: list[float]) -> None:
            chosen = [indices[j] for j in local]
            for i, value in zip(chosen, values):
                results[i] = value
            if on_done is not None:
                on_done(chosen, values)

        if fast:
            from pytest_modelbench.scoring.prefix_sharing import FastStats

            runner.stats = FastStats()
            longest = max(len(rows[i][0]) for i in fast)
            runner.score(
                [rows[i][0] for i in fast], [rows[i][1] for i in fast],
                batch_size=self._resolve_batch_size,
                token_budget=None if self.batch_size == "auto" else self.batch_size * longest,
                on_done=lambda local, values: relay(fast, local, values),
            )
            self.last_stats = runner.stats
        if truncated:
            self._score_plain(rows, truncated, lambda local, values: relay(truncated, local, values))
        return results

    # --- the plain path (lm-eval's procedure) -----------------------------------------------------------------------

    def _score_plain(self, rows, subset: list[int], on_done=None, forward=None) -> list:
        """`forward`: the batch function, `_forward` (log-likelihoods) unless given."""
        forward = forward or self._forward
        order = sorted(range(len(subset)), key=lambda k: (-len(rows[subset[k]][0]), rows[subset[k]][0]))
        batch_size = self._resolve_batch_size(max((len(rows[i][0]) for i in subset), default=1))
        results = [0.0] * len(subset)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            values = forward([rows[subset[k]] for k in chunk])
            for k, value in zip(chunk, values):
                results[k] = value
            if on_done is not None:
                on_done(chunk, values)
        return results

    def _model_inputs(self, encoded: Sequence[EncodedRequest]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Every request's model input, all validated before any is scored (a RequestError carries the index)."""
        rows = []
        for i, req in enumerate(encoded):
            try:
                rows.append(self._model_input(req))
            except RequestError as exc:
                raise RequestError(exc.problem, i) from None
        return rows

    def _model_input(self, req: EncodedRequest) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Left-truncate to max_length as lm-eval does: keep the last max_length+1 tokens, drop the final one."""
        if not req.continuation:
            raise RequestError("the continuation is empty after tokenization")
        if len(req.continuation) > self.max_length:
            raise RequestError(
                f"the continuation has {len(req.continuation)} tokens, more than the model's maximum length "
                f"{self.max_length}"
            )
        full = (req.context + req.continuation)[-(self.max_length + 1):][:-1]
        return full, req.continuation

    def _forward(self, rows: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> list[float]:
        return [loglikelihood for loglikelihood, _ in self._forward_greedy(rows)]

    @torch.inference_mode()
    def _forward_greedy(self, rows: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> list[tuple[float, bool]]:
        """lm-eval's forward: one right-padded batch, full logits; per row the continuation's summed log-probability
        and whether every continuation token is the argmax of the log-probabilities at its position."""
        width = max(len(inp) for inp, _ in rows)
        batch = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (inp, _) in enumerate(rows):
            batch[r, : len(inp)] = torch.tensor(inp)
        logits = self.model(batch.to(self.device)).logits
        values = []
        for r, (inp, cont) in enumerate(rows):
            scored = logits[r, len(inp) - len(cont): len(inp)]
            logprobs = F.log_softmax(scored, dim=-1)
            target = torch.tensor(cont, device=logprobs.device)
            values.append((float(logprobs.gather(-1, target.unsqueeze(-1)).sum()),
                           bool((logprobs.argmax(dim=-1) == target).all())))
        return values

    def _resolve_batch_size(self, longest: int, chosen: int | str | None = None) -> int:
        """`chosen` (default: `batch_size`) as a number of rows, for rows of `longest` tokens."""
        chosen = self.batch_size if chosen is None else chosen
        return auto_batch_size(self.model, longest) if chosen == "auto" else int(chosen)

    # --- the fast path: chosen once per scorer, after a numerical check against the plain path ----------------------

    def _fast_runner(self):
        if self._fast_checked:
            return self._runner
        self._fast_checked = True
        from pytest_modelbench.scoring.prefix_sharing import PrefixSharingRunner, probe_fast_path

        reason = PrefixSharingRunner.supports(self.model)
        if reason is None:
            for mode in ("projection", "full"):
                runner = PrefixSharingRunner(self.model, self.device, mode)
                error = probe_fast_path(runner, self._forward)
                if error is None:
                    self._runner = runner
                    return runner
                reason = f"{mode} mode differs from the plain path by {error:.2g}"
        warnings.warn(f"pytest-modelbench: shared-prefix scoring is off for this model ({reason}); "
                      "scoring every request in full", stacklevel=3)
        return None

    def generation_cache_namespace(self) -> str | None:
        """The seam's: the model and settings part of a generation's cache key (scoring/cached_generation.py)."""
        if self._generation_base is None:
            return None
        return json.dumps({"model": self._generation_base}, sort_keys=True)  # a sampled request's key holds its seed

    @cached_property
    def _generation_base(self) -> str | None:
        from pytest_modelbench.scoring.cached import cache_namespace
        from pytest_modelbench.scoring.cached_generation import PROTOCOL_VERSION

        return cache_namespace(
            self.cache, self.fingerprint, self.model, self.encoder.tokenizer, protocol=PROTOCOL_VERSION,
            device=placement_label(self.model), max_length=self.max_length, add_bos_token=self.encoder.add_bos_token,
        )

    def cache_namespace(self, shared_tokens: bool) -> str | None:
        """The seam's: the same for every request (`shared_tokens` matters to masked LMs only)."""
        return self._cache_namespace()

    def _cache_namespace(self) -> str | None:
        """The cache key's model and settings part; None when no cache or the weights cannot be identified."""
        if self._namespace is None:
            from pytest_modelbench.scoring.cached import cache_namespace

            self._namespace = cache_namespace(
                self.cache, self.fingerprint, self.model, self.encoder.tokenizer, device=placement_label(self.model),
                max_length=self.max_length, prefix_token_id=self.encoder.prefix_token_id,
                add_bos_token=self.encoder.add_bos_token, path="fast" if self.fast else "plain",
                # lm-eval's padding makes the plain path's numbers depend on the batch size; the fast path's batches
                # move them only by float rounding
                batch_size=None if self.fast else self.batch_size,
            )
        return self._namespace


def auto_batch_size(model, sequence_length: int) -> int:
    """Largest batch (≤ 64) whose logits and activations fit in a quarter of the free memory of the device with the
    least of it among those the model runs on (every one holds a batch's activations)."""
    config = getattr(model.config, "text_config", None) or model.config
    vocab = getattr(config, "vocab_size", 50_000)
    hidden = getattr(config, "hidden_size", 1024)
    bytes_per_row = sequence_length * (vocab + 16 * hidden) * 4
    free = min(_free_memory_bytes(device) for device in compute_devices(model))
    return max(1, min(MAX_AUTO_BATCH, int(free * 0.25 // max(bytes_per_row, 1))))


def _free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 * 1024**3


def weights_dtype(model) -> str:
    """'float32', 'bfloat16', ...: the dtype of the model's first parameter."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")
