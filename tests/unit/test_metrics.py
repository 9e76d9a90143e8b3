"""Per-document metrics and aggregation, checked against hand-computed values."""

from __future__ import annotations

import math
import statistics
import numpy as np

from pytest_modelbench.metrics.aggregate import MetricSummary
from pytest_modelbench.metrics.registry import METRICS
from pytest_modelbench.tasks.requests import DocumentRequests


def doc(choices, gold=0, category=None):
    return DocumentRequests(0, "ctx", tuple(choices), tuple(" " + c for c in choices), gold, category, {})


def test_acc_ties_go_to_the_first_index():
    assert METRICS["acc"].per_document(doc(["a", "b"], gold=0), [-1.0, -1.0]) == 1.0
    assert METRICS["acc"].per_document(doc(["a", "b"], gold=1), [-1.0, -1.0]) == 0.0


def test_acc_norm_divides_by_characters_not_bytes():
    # "ঢা" is 2 code points and 6 UTF-8 bytes; "abc" is 3 of each.
    # Characters: -4/2 = -2.0 < -5/3 ≈ -1.67, so choice 1. Bytes: -4/6 ≈ -0.67 > -5/3, so choice 0.
    pair = doc(["ঢা", "abc"], gold=0)
    assert METRICS["acc_norm"].per_document(pair, [-4.0, -5.0]) == 0.0
    assert METRICS["acc_bytes"].per_document(pair, [-4.0, -5.0]) == 1.0
    assert METRICS["acc"].per_document(pair, [-4.0, -5.0]) == 1.0


def test_multiple_gold():
    assert METRICS["acc"].per_document(doc(["a", "b", "c"], gold=(1, 2)), [-3.0, -1.0, -2.0]) == 1.0


def test_crows_pairs_metrics_are_strict_and_absolute():
    pair = doc(["more", "less"])
    assert METRICS["pct_stereotype"].per_document(pair, [-10.0, -10.0]) == 0.0
    assert METRICS["pct_stereotype"].per_document(pair, [-9.0, -10.0]) == 1.0
    assert METRICS["likelihood_diff"].per_document(pair, [-12.5, -10.0]) == 2.5


def test_stderr_is_sample_std_over_sqrt_n():
    values = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    summary = MetricSummary.of(values)
    assert summary.value == 0.6
    assert math.isclose(summary.stderr, statistics.stdev(values) / math.sqrt(5))
    assert MetricSummary.of(np.array([])) == MetricSummary(None, None, 0)
    assert MetricSummary.of(np.array([1.0])).stderr is None
