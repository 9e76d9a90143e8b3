"""loglikelihood_rolling metrics as lm-eval 0.4.13 computes them from each document's rolling log-likelihood.

Per document the value is the text's total log-likelihood (its per-document value in baselines and --log-samples);
the task-level values are lm-eval's weighted aggregates over the documents' texts (the document's `gold`):
word_perplexity = exp(-Σll / Σwords), words counted as lm-eval does (`len(re.split(r"\\s+", text))`);
byte_perplexity = exp(-Σll / Σbytes) and bits_per_byte = -Σll / Σbytes / ln 2, bytes of the UTF-8 encoding.
Lower is better for all three; the gate compares them with a paired bootstrap that re-applies the aggregate.
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

import numpy as np

ROLLING_METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")


def document_loglikelihood(doc, values: Sequence[float]) -> float:
    """A rolling document's single value: its text's log-likelihood."""
    return float(values[0])


def _count_words(text: str) -> int:
    return len(re.split(r"\s+", text))


def _count_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _total(values: Mapping[str, np.ndarray], name: str) -> float:
    return float(np.sum(values[name]))


def aggregate_word_perplexity(values: Mapping[str, np.ndarray], documents: Sequence) -> float:
    return math.exp(-_total(values, "word_perplexity") / sum(_count_words(doc.gold) for doc in documents))


def aggregate_byte_perplexity(values: Mapping[str, np.ndarray], documents: Sequence) -> float:
    return math.exp(-_total(values, "byte_perplexity") / sum(_count_bytes(doc.gold) for doc in documents))


def aggregate_bits_per_byte(values: Mapping[str, np.ndarray], documents: Sequence) -> float:
    return -_total(values, "bits_per_byte") / sum(_count_bytes(doc.gold) for doc in documents) / math.log(2)
