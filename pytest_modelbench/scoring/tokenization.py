"""Requests as token ids, tokenized as lm-eval's HFLM tokenizes them (the scorers' and the rolling windows' shared
input; scoring/causal.py, scoring/rolling.py, scoring/server/scorer.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class EncodedRequest:
    context: tuple[int, ...]
    continuation: tuple[int, ...]


class CausalTokenizer:
    """Encodes request pairs with lm-eval's seam rules (whitespace moves to the continuation; joint tokenization)."""

    def __init__(self, tokenizer, prefix_token_id: int | None = None, add_bos_token: bool | None = None):
        self.tokenizer = tokenizer
        if prefix_token_id is None:
            prefix_token_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        self.prefix_token_id = prefix_token_id
        self.add_bos_token = add_bos_token

    def encode(self, text: str) -> list[int]:
        add_special = True if self.add_bos_token is None else self.add_bos_token
        bos = self.tokenizer.bos_token
        if bos and text.startswith(bos):
            add_special = False
        return self.tokenizer.encode(text, add_special_tokens=add_special)

    def encode_pair(self, context: str, continuation: str,
                    encode_context: Callable[[str], list[int]] | None = None) -> EncodedRequest:
        """`encode_context`: how to encode the context alone (default `encode`; encode_pairs passes a memo)."""
        if context == "":
            cont = self.tokenizer.encode(continuation, add_special_tokens=False)
            ctx = [self.prefix_token_id]
            if cont and cont[0] == self.prefix_token_id:
                ctx, cont = cont[:1], cont[1:]
            return EncodedRequest(tuple(ctx), tuple(cont))
        trailing = len(context) - len(context.rstrip())
        if trailing:
            context, continuation = context[:-trailing], context[-trailing:] + continuation
        whole = self.encode(context + continuation)
        context_ids = (encode_context or self.encode)(context)
        return EncodedRequest(tuple(context_ids), tuple(whole[len(context_ids):]))

    def encode_pairs(self, requests: Sequence[tuple[str, str]]) -> list[EncodedRequest]:
        """encode_pair for each request; a context shared by several requests (a document's choices) is encoded once."""
        memo: dict[str, list[int]] = {}

        def encode_context(text: str) -> list[int]:
            if text not in memo:
                memo[text] = self.encode(text)
            return memo[text]

        return [self.encode_pair(context, continuation, encode_context) for context, continuation in requests]
