"""loglikelihood metrics as lm-eval 0.4.13 computes them from each document's response: the log-likelihood of its
continuation and whether that continuation is the greedy one (every token the argmax at its position).

acc: per document is_greedy (0/1), the task value their mean. perplexity: per document the log-likelihood (its
per-document value in baselines and --log-samples), the task value exp(-mean log-likelihood); lower is better, and
the gate compares it with a paired bootstrap that re-applies the aggregate.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from pytest_modelbench.errors import MetricError

_LARGEST_EXPONENT = math.log(np.finfo(float).max)


def document_loglikelihood(doc, response: tuple[float, bool]) -> float:
    return float(response[0])


def document_is_greedy(doc, response: tuple[float, bool]) -> float:
    return float(response[1])


def aggregate_perplexity(values: Mapping[str, np.ndarray], documents: Sequence) -> float:
    mean = float(np.mean(values["perplexity"]))
    if -mean > _LARGEST_EXPONENT:
        raise MetricError(f"perplexity exp({-mean:.1f}) is too large to represent: the mean log-likelihood of the "
                          "continuations is below -709 nats")
    return math.exp(-mean)
