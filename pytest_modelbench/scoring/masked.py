"""Pseudo-log-likelihoods of a document's choices under a masked LM (BERT, RoBERTa, ...).

A masked LM has no left-to-right probability of a sentence; it is scored by masking one token at a time and summing
log P(token | the rest) over the scored tokens (Salazar et al. 2020, "Masked Language Model Scoring"). All masked
copies of one sentence go through the model in ONE batched forward pass (one row per scored token, that token
replaced by the mask token); row i's prediction at its masked position is exactly the one-mask-at-a-time value.
`--batch-size N` puts the copies of N sentences in one pass (right-padded, padding masked from attention).

A task picks the scored tokens with `modelbench.masked_protocol`:
- `pll` (default): every token of the continuation (the choice), given the context and the rest of the continuation.
  A non-empty context is encoded as the first segment of a sentence pair ([CLS] context [SEP] choice [SEP] for BERT).
- `pll_shared`: CrowS-Pairs' metric (Nangia et al. 2020, nyu-mll/crows-pairs scripts/metric.py): a document has two
  choices; their token sequences are aligned with difflib.SequenceMatcher and only the tokens in the "equal" blocks
  (shared by both sentences, special tokens excluded) are masked in turn. The tokens that differ (the social group)
  are never masked: each sentence is scored by how likely its unchanged words are given its own group mention.

Memory: one forward pass holds (scored tokens × sequence length × vocabulary) logits, e.g. about 0.4 GB for a
60-token sentence with BERT's 30k vocabulary.
"""

from __future__ import annotations

import difflib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from pytest_modelbench.errors import DocumentError, ModelLoadError, RequestError
from pytest_modelbench.scoring.backend import (
    BackendInfo, DocumentRequest, LoglikelihoodRequest, OnBatch, output_type_unsupported,
)
from pytest_modelbench.scoring.causal import weights_dtype
from pytest_modelbench.scoring.front import TaskFront
from pytest_modelbench.scoring.placement import input_device, placement_description, placement_label

PROTOCOLS = ("pll", "pll_shared")
DEFAULT_MAX_LENGTH = 512


@dataclass(frozen=True)
class MaskedInput:
    """A tokenized (context, continuation): model inputs and the positions of the continuation's tokens."""

    input_ids: tuple[int, ...]
    token_type_ids: tuple[int, ...] | None
    continuation_positions: tuple[int, ...]


def resolve_masked_max_length(model, tokenizer) -> int:
    candidates = []
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and model_max < 1e29:  # transformers' "infinite" sentinel is ~1e30
        candidates.append(model_max)
    positions = getattr(model.config, "max_position_embeddings", None)
    if isinstance(positions, int):
        candidates.append(positions)
    return min(candidates) if candidates else DEFAULT_MAX_LENGTH


class MaskedLMScorer(TaskFront):
    """Pseudo-log-likelihoods of documents' choices. As for causal LMs (scoring/causal.py): `batch_size` sentences
    (an integer, or 'auto' from free memory) go through the model together, each as its masked copies; `cache` (a
    ScoreCache) with `fingerprint` (LoadedModel.fingerprint) reuses scores of earlier runs; `progress` (a line
    sink) reports long scoring; both through the front (scoring/front.py)."""

    def __init__(self, model, tokenizer, *, max_length: int | None = None,
                 batch_size: int | str = 1, cache=None, fingerprint: str | None = None,
                 progress: Callable[[str], None] | None = None, name: str = ""):
        if tokenizer.mask_token_id is None:
            raise ModelLoadError(
                f"tokenizer {type(tokenizer).__name__} has no mask token, so the model cannot be scored as a masked LM "
                "(use --model-type causal)"
            )
        self.name = name
        self.explicit_settings = {"max_length": max_length} if max_length is not None else {}
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = input_device(model)
        self.mask_token_id = int(tokenizer.mask_token_id)
        self.max_length = max_length or resolve_masked_max_length(model, tokenizer)
        self.batch_size = batch_size
        self.cache = cache
        self.fingerprint = fingerprint
        self.progress = progress
        self._namespaces: dict[str, str | None] = {}

    # --- tokenization -------------------------------------------------------------------------------------------

    def encode(self, context: str, continuation: str) -> MaskedInput:
        context, continuation = context.rstrip(), continuation.lstrip()
        n_context = len(self.tokenizer(context, add_special_tokens=False)["input_ids"]) if context else 0
        n_continuation = len(self.tokenizer(continuation, add_special_tokens=False)["input_ids"])
        args = (context, continuation) if context else (continuation,)
        encoded = self.tokenizer(*args, return_special_tokens_mask=True)
        ids = tuple(int(i) for i in encoded["input_ids"])
        ordinary = [i for i, special in enumerate(encoded["special_tokens_mask"]) if not special]
        if len(ordinary) != n_context + n_continuation:
            raise RequestError(
                f"cannot locate the continuation's tokens: the tokenizer gave {len(ordinary)} non-special "
                f"tokens for context and continuation together, but {n_context} (context) + {n_continuation} "
                "(continuation) apart"
            )
        token_types = encoded.get("token_type_ids")
        return MaskedInput(ids, tuple(token_types) if token_types is not None else None, tuple(ordinary[n_context:]))

    # --- scoring ------------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def units_logprobs(self, units: Sequence[tuple[MaskedInput, Sequence[int]]]) -> list[float]:
        """Summed log-probabilities of several sentences' scored positions in ONE forward pass: every sentence
        contributes its masked copies, right-padded to the longest sentence (padding is masked from attention)."""
        rows = [(encoded, position) for encoded, positions in units for position in positions]
        if not rows:
            return [0.0] * len(units)
        width = max(len(encoded.input_ids) for encoded, _ in rows)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        types = torch.zeros((len(rows), width), dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (encoded, _) in enumerate(rows):
            n = len(encoded.input_ids)
            ids[r, :n] = torch.tensor(encoded.input_ids)
            attention[r, :n] = 1
            if encoded.token_type_ids is not None:
                types[r, :n] = torch.tensor(encoded.token_type_ids)
        where = torch.tensor([p for _, p in rows], dtype=torch.long)
        targets = ids[torch.arange(len(rows)), where].clone()
        ids[torch.arange(len(rows)), where] = self.mask_token_id
        inputs = {"input_ids": ids.to(self.device), "attention_mask": attention.to(self.device)}
        if any(encoded.token_type_ids is not None for encoded, _ in rows):
            inputs["token_type_ids"] = types.to(self.device)
        logits = self.model(**inputs).logits
        index = torch.arange(len(rows), device=logits.device)
        logprobs = F.log_softmax(logits[index, where.to(logits.device)].float(), dim=-1)
        values = logprobs[index, targets.to(logprobs.device)].double().cpu().numpy()
        sums, start = [], 0
        for _, positions in units:
            sums.append(float(values[start:start + len(positions)].sum()))
            start += len(positions)
        return sums

    def pll(self, context: str, continuation: str, where: str = "request") -> float:
        """Pseudo-log-likelihood of every continuation token (protocol `pll`); `where` names the request in errors."""
        with _named(where):
            return self.units_logprobs([self._choice_unit(context, continuation)])[0]

    def pll_shared(self, context: str, continuations: Sequence[str], where: str = "document") -> list[float]:
        """CrowS-Pairs: pseudo-log-likelihood of the tokens both continuations share (protocol `pll_shared`)."""
        with _named(where):
            return [self.units_logprobs([unit])[0] for unit in self._pair_units(context, continuations)]

    def _choice_unit(self, context: str, continuation: str) -> tuple[MaskedInput, list[int]]:
        encoded = self._checked(self.encode(context, continuation))
        return encoded, list(encoded.continuation_positions)

    def _pair_units(self, context: str, continuations: Sequence[str]) -> list[tuple[MaskedInput, list[int]]]:
        if len(continuations) != 2:
            raise RequestError(f"masked_protocol pll_shared needs exactly 2 choices, got {len(continuations)}")
        first, second = (self._checked(self.encode(context, c)) for c in continuations)
        return list(zip((first, second), shared_positions(first, second)))

    def _checked(self, encoded: MaskedInput) -> MaskedInput:
        if len(encoded.input_ids) > self.max_length:
            raise RequestError(
                f"{len(encoded.input_ids)} tokens exceed the masked LM's maximum length {self.max_length}")
        if not encoded.continuation_positions:
            raise RequestError("a choice has no tokens to score")
        return encoded

    def _units(self, request: DocumentRequest) -> list[tuple[MaskedInput, list[int]]]:
        """A document's sentences to score, one per choice: the encoded input and the positions masked in turn."""
        if request.shared_tokens:
            return self._pair_units(request.context, request.continuations)
        return [self._choice_unit(request.context, c) for c in request.continuations]

    # --- the seam (scoring/backend.py) ------------------------------------------------------------------------------

    def document_loglikelihoods(self, requests: Sequence[DocumentRequest],
                                on_batch: OnBatch | None = None) -> list[list[float]]:
        """Whole documents: with shared tokens a choice's score depends on the other sentence of its pair. Every
        document is encoded (and checked) before any is scored; `batch_size` sentences go through the model at once."""
        pending = []  # (document, choice, unit), in request order
        for d, request in enumerate(requests):
            try:
                pending += [(d, c, unit) for c, unit in enumerate(self._units(request))]
            except RequestError as exc:
                raise RequestError(exc.problem, d) from None
        rows: list[list[float]] = [[0.0] * len(request.continuations) for request in requests]
        step = self._units_per_batch([unit for _, _, unit in pending])
        for start in range(0, len(pending), step):
            chunk = pending[start:start + step]
            values = self.units_logprobs([unit for _, _, unit in chunk])
            for (d, c, _), value in zip(chunk, values):
                rows[d][c] = value
            if on_batch is not None:
                on_batch(list(range(start, start + len(chunk))), values)
        return rows

    def loglikelihoods(self, requests: Sequence[LoglikelihoodRequest],
                       on_batch: OnBatch | None = None) -> list[float]:
        """Loose requests, each scored on its own (the pll protocol)."""
        documents = [DocumentRequest(r.context, (r.continuation,)) for r in requests]
        return [values[0] for values in self.document_loglikelihoods(documents, on_batch)]

    def cache_namespace(self, shared_tokens: bool) -> str | None:
        protocol = "pll_shared" if shared_tokens else "pll"
        if protocol not in self._namespaces:
            from pytest_modelbench.scoring.cached import cache_namespace

            self._namespaces[protocol] = cache_namespace(
                self.cache, self.fingerprint, self.model, self.tokenizer, device=placement_label(self.model),
                max_length=self.max_length, path="masked", masked_protocol=protocol,
            )
        return self._namespaces[protocol]

    def describe(self) -> BackendInfo:
        return BackendInfo(self.name, self.fingerprint or "", "masked", weights_dtype(self.model),
                           placement_description(self.model), dict(self.explicit_settings))

    def score_documents(self, documents: Sequence, protocol: str = "pll", where: str = "",
                        label: str = "scoring") -> list[list[float]]:
        """Documents (DocumentRequests of a prepared task) under a masked protocol, through the front (scoring/front.py:
        the score cache, progress); `where` comes before "document <id>" in errors."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown masked protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
        shared = protocol == "pll_shared"
        requests = [DocumentRequest(doc.context, tuple(doc.continuations), shared) for doc in documents]
        return self.front().document_values(requests, lambda d: f"{where}document {documents[d].doc_id}", label=label)

    def _units_per_batch(self, units: Sequence[tuple[MaskedInput, Sequence[int]]]) -> int:
        if self.batch_size != "auto":
            return int(self.batch_size)
        from pytest_modelbench.scoring.causal import auto_batch_size

        longest = max((len(encoded.input_ids) for encoded, _ in units), default=1)
        copies = max((len(positions) for _, positions in units), default=1) or 1
        return max(1, auto_batch_size(self.model, longest) // copies)

    def generate_task(self, prepared) -> list[str]:
        raise output_type_unsupported(prepared, "masked LM")

    def rolling_loglikelihood_task(self, prepared) -> list[float]:
        raise output_type_unsupported(prepared, "masked LM")

    def loglikelihood_task(self, prepared) -> list[tuple[float, bool]]:
        raise output_type_unsupported(prepared, "masked LM")


def shared_positions(first: MaskedInput, second: MaskedInput) -> tuple[list[int], list[int]]:
    """Positions of the tokens in difflib's "equal" blocks of the two id sequences, within both continuations."""
    scored_first, scored_second = set(first.continuation_positions), set(second.continuation_positions)
    matcher = difflib.SequenceMatcher(None, list(first.input_ids), list(second.input_ids))
    positions_first, positions_second = [], []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            continue
        for i, j in zip(range(i1, i2), range(j1, j2)):
            if i in scored_first and j in scored_second:
                positions_first.append(i)
                positions_second.append(j)
    return positions_first, positions_second


@contextmanager
def _named(where: str) -> Iterator[None]:
    """A request the scorer cannot score, as a DocumentError naming it (for callers outside the front)."""
    try:
        yield
    except RequestError as exc:
        raise DocumentError(f"{where}: {exc.problem}") from None
