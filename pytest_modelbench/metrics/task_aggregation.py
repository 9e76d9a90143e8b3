"""A metric's aggregation named in its metric_list entry: lm-eval's `median` or `perplexity`, or the task's own
`aggregation: !function` (--allow-task-code), called as lm-eval calls it: with the list of per-document items.

The items are the per-document values, except for multiple_choice's f1 and mcc, whose items in lm-eval are
(gold, predicted choice) pairs: the stored per-document value is the predicted choice, the gold is the document's.
A process_results value that is a list (IFEval's per-instruction outcomes) is passed as each document's list of
floats, of its own length, in document order (lm-eval passes the lists as process_results returned them: bools there).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pytest_modelbench.errors import MetricError, TaskCodeError, UndefinedAggregateError

GOLD_AND_PREDICTION = ("f1", "mcc")  # multiple_choice metrics whose lm-eval items are (gold, prediction)


@dataclass(frozen=True)
class TaskAggregation:
    key: str  # the metric's name (with its filter for generate_until), as its values are stored
    how: str | Callable[[list], Any]  # "median", "perplexity", or a resolved !function
    gold_and_prediction: bool = False

    def __call__(self, values: Mapping[str, np.ndarray], documents: Sequence) -> float:
        items = values[self.key]
        if self.how == "median":
            return float(sorted(items)[len(items) // 2])  # lm-eval's median: the upper middle, never an average
        if self.how == "perplexity":
            mean = float(np.mean(items))
            if -mean > math.log(np.finfo(float).max):
                raise MetricError(f"metric '{self.key}': perplexity exp({-mean:.1f}) is too large to represent")
            return math.exp(-mean)
        if self.gold_and_prediction:
            arguments = [(list(doc.gold) if isinstance(doc.gold, tuple) else doc.gold, int(pred))
                         for doc, pred in zip(documents, items)]
        elif items.dtype == object or items.ndim == 2:  # each document's list (process_results), passed as lists;
            # 2-D: lists that happen to be of one length, made dense (a group's column, metrics/group_scores.py)
            arguments = [[float(v) for v in row] for row in items]
        else:
            arguments = [float(v) for v in items]
        try:
            value = self.how(arguments)
        except TaskCodeError as exc:
            raise MetricError(f"metric '{self.key}', aggregation {exc}") from None
        if isinstance(value, numbers.Real) and math.isnan(value):
            raise UndefinedAggregateError(
                f"metric '{self.key}': aggregation !function {self.how.dotted_name} is undefined on these "
                f"{len(arguments)} documents (it returned NaN, as lm-eval's aggregations do where a score has nothing "
                "to count, e.g. no document of the kind it is over)")
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise MetricError(f"metric '{self.key}': aggregation !function {self.how.dotted_name} returned "
                              f"{value!r} ({type(value).__name__}), not a finite number")
        return float(value)
