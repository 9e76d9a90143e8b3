"""lm-eval 0.4.13's rolling windows for loglikelihood_rolling: a text's tokens split so every token is scored once.

The first window predicts the first `max_length` tokens after the prefix token (BOS, else EOS); each later window
predicts the next `max_length` tokens (fewer at the end) conditioned on as many tokens before them as fit, so that
context plus prediction is `max_length + 1` tokens (lm-eval's `get_rolling_token_windows` with context_len 1 followed
by `make_disjoint_window`). A text's log-likelihood is the sum over its windows.
"""

from __future__ import annotations

from typing import Sequence

from pytest_modelbench.scoring.causal import EncodedRequest


def rolling_windows(tokens: Sequence[int], prefix_token: int, max_length: int) -> list[EncodedRequest]:
    tokens = list(tokens)
    if not tokens:
        return []
    first = min(max_length, len(tokens))
    windows = [EncodedRequest((prefix_token,), tuple(tokens[:first]))]
    predicted = first
    while predicted < len(tokens):
        end = predicted + min(len(tokens) - predicted, max_length)
        windows.append(EncodedRequest(tuple(tokens[end - max_length - 1:predicted]), tuple(tokens[predicted:end])))
        predicted = end
    return windows


def document_totals(values: Sequence[float], per_document: Sequence[Sequence[EncodedRequest]]) -> list[float]:
    """Each document's log-likelihood: the sum of its windows' values (`values`: every window's, in order)."""
    totals, start = [], 0
    for windows in per_document:
        totals.append(sum(values[start:start + len(windows)]))
        start += len(windows)
    return totals
