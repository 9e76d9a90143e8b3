"""lm-eval 0.4.13's rolling windows for loglikelihood_rolling: a text's tokens split so every token is scored once.

The first window predicts the first `max_length` tokens after the prefix token (BOS, else EOS); each later window
predicts the next `max_length` tokens (fewer at the end) conditioned on as many tokens before them as fit, so that
context plus prediction is `max_length + 1` tokens (lm-eval's `get_rolling_token_windows` with context_len 1 followed
by `make_disjoint_window`). A text's log-likelihood is the sum over its windows, in order.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Sequence

from pytest_modelbench.scoring.backend import OnBatch, Unscored
from pytest_modelbench.scoring.tokenization import CausalTokenizer, EncodedRequest


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


def text_windows(encoder: CausalTokenizer, texts: Sequence[str], max_length: int) -> list[list[EncodedRequest]]:
    """Each text's windows, its tokens encoded as a context is (BOS by the tokenizer's default)."""
    return [rolling_windows(encoder.encode(text), encoder.prefix_token_id, max_length) for text in texts]


class WindowTotals:
    """Texts' log-likelihoods from their windows' values (all windows, text by text, in order): each text's total
    passed to `on_batch(texts, totals)` once its last window is in."""

    def __init__(self, per_text: Sequence[Sequence[EncodedRequest]], on_batch: OnBatch | None):
        self.owners = [t for t, windows in enumerate(per_text) for _ in windows]
        self.starts = [0, *accumulate(len(windows) for windows in per_text)]
        self.left = [len(windows) for windows in per_text]
        self.values = [0.0] * len(self.owners)
        self.on_batch = on_batch
        self.failed: dict[int, Unscored] = {}  # text → why a window of it could not be scored

    def windows_failed(self, indices: Sequence[int], why: str) -> None:
        """Windows the backend could not score: their texts are unscored (scoring/backend.py, `Unscored`)."""
        texts = sorted({self.owners[i] for i in indices} - set(self.failed))
        self.failed.update((t, Unscored(why)) for t in texts)
        if texts and self.on_batch is not None:
            self.on_batch(texts, [self.failed[t] for t in texts])

    def windows_done(self, indices: Sequence[int], values: Sequence[float]) -> None:
        done = []
        for i, value in zip(indices, values):
            self.values[i] = value
            self.left[self.owners[i]] -= 1
            if self.left[self.owners[i]] == 0 and self.owners[i] not in self.failed:
                done.append(self.owners[i])
        if done and self.on_batch is not None:
            self.on_batch(done, [self.total(t) for t in done])

    def total(self, text: int) -> float:
        return sum(self.values[self.starts[text]:self.starts[text + 1]])

    def totals(self) -> list[float | Unscored]:
        return [self.failed.get(text) or self.total(text) for text in range(len(self.left))]
