"""Pseudo-log-likelihoods of a document's choices under a masked LM (BERT, RoBERTa, ...).

A masked LM has no left-to-right probability of a sentence; it is scored by masking one token at a time and summing
log P(token | the rest) over the scored tokens (Salazar et al. 2020, "Masked Language Model Scoring"). All masked
copies of one sentence go through the model in ONE batched forward pass (one row per scored token, that token
replaced by the mask token); row i's prediction at its masked position is exactly the one-mask-at-a-time value.

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
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from pytest_modelbench.errors import DocumentError, ModelLoadError

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


class MaskedLMScorer:
    def __init__(self, model, tokenizer, *, device: str = "cpu", max_length: int | None = None):
        if tokenizer.mask_token_id is None:
            raise ModelLoadError(
                f"tokenizer {type(tokenizer).__name__} has no mask token, so the model cannot be scored as a masked LM "
                "(use --model-type causal)"
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.mask_token_id = int(tokenizer.mask_token_id)
        self.max_length = max_length or resolve_masked_max_length(model, tokenizer)

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
            raise ValueError(
                f"cannot locate the continuation's tokens: {len(ordinary)} non-special tokens, expected "
                f"{n_context} (context) + {n_continuation} (continuation)"
            )
        token_types = encoded.get("token_type_ids")
        return MaskedInput(ids, tuple(token_types) if token_types is not None else None, tuple(ordinary[n_context:]))

    # --- scoring ------------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def token_logprobs(self, encoded: MaskedInput, positions: Sequence[int]) -> np.ndarray:
        """log P(token at p | all other tokens) for each p, from ONE forward pass over len(positions) masked copies."""
        if not positions:
            return np.zeros(0)
        rows = torch.arange(len(positions))
        where = torch.tensor(list(positions), dtype=torch.long)
        ids = torch.tensor(encoded.input_ids, dtype=torch.long)
        batch = ids.repeat(len(positions), 1)
        batch[rows, where] = self.mask_token_id
        inputs = {"input_ids": batch.to(self.device), "attention_mask": torch.ones_like(batch).to(self.device)}
        if encoded.token_type_ids is not None:
            types = torch.tensor(encoded.token_type_ids, dtype=torch.long)
            inputs["token_type_ids"] = types.repeat(len(positions), 1).to(self.device)
        logits = self.model(**inputs).logits
        picked = logits[rows.to(logits.device), where.to(logits.device)].float()
        logprobs = F.log_softmax(picked, dim=-1)
        targets = ids[where].to(logprobs.device)
        return logprobs[rows.to(logprobs.device), targets].double().cpu().numpy()

    def pll(self, context: str, continuation: str, where: str = "request") -> float:
        """Pseudo-log-likelihood of every continuation token (protocol `pll`)."""
        encoded = self._checked(self.encode(context, continuation), where)
        return float(self.token_logprobs(encoded, encoded.continuation_positions).sum())

    def pll_shared(self, context: str, continuations: Sequence[str], where: str = "document") -> list[float]:
        """CrowS-Pairs: pseudo-log-likelihood of the tokens both continuations share (protocol `pll_shared`)."""
        if len(continuations) != 2:
            raise DocumentError(
                f"{where}: masked_protocol pll_shared needs exactly 2 choices, got {len(continuations)}"
            )
        first, second = (self._checked(self.encode(context, c), where) for c in continuations)
        positions_first, positions_second = shared_positions(first, second)
        return [
            float(self.token_logprobs(first, positions_first).sum()),
            float(self.token_logprobs(second, positions_second).sum()),
        ]

    def _checked(self, encoded: MaskedInput, where: str) -> MaskedInput:
        if len(encoded.input_ids) > self.max_length:
            raise DocumentError(
                f"{where}: {len(encoded.input_ids)} tokens exceed the masked LM's maximum length {self.max_length}"
            )
        if not encoded.continuation_positions:
            raise DocumentError(f"{where}: a choice has no tokens to score")
        return encoded

    def score_documents(self, documents: Sequence, protocol: str = "pll", where: str = "") -> list[list[float]]:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown masked protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
        results = []
        for doc in documents:
            doc_where = f"{where}document {doc.doc_id}"
            if protocol == "pll_shared":
                results.append(self.pll_shared(doc.context, doc.continuations, doc_where))
            else:
                results.append([self.pll(doc.context, cont, doc_where) for cont in doc.continuations])
        return results

    def for_task(self, prepared) -> "TaskBoundMaskedScorer":
        return TaskBoundMaskedScorer(self, prepared)


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


class TaskBoundMaskedScorer:
    """The evaluation's Scorer for one prepared task: masked scoring needs whole documents, not loose requests."""

    def __init__(self, scorer: MaskedLMScorer, prepared):
        self.scorer = scorer
        self.prepared = prepared

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        documents = self.prepared.documents
        expected = [(doc.context, cont) for doc in documents for cont in doc.continuations]
        if list(requests) != expected:
            raise ValueError("a masked-LM scorer bound to a task scores that task's documents, in order")
        config = self.prepared.config
        per_document = self.scorer.score_documents(
            documents, config.masked_protocol, where=f"{config.source}: task '{config.task}', "
        )
        return [value for values in per_document for value in values]
