"""What the gate says about itself (issue 36, item 5): the MDE of an entry with no changed document, and "improved"
controlled for multiplicity like "regressed"."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.evidence.pooling import PoolingStats
from pytest_modelbench.gate.evidence.significance import detectable_regression
from pytest_modelbench.gate.pooled import pooled_entries
from pytest_modelbench.gate.verdict import Verdict
from tests.fixtures.gate_records import make_record


def _least_churn_mde(margin: float, alpha: float, n: int, power: float = 0.8) -> float:
    """The drop a candidate that only loses documents (each right one lost with the same probability: its drop has a
    standard error of about √(δ(1−δ)/n)) must have to test as worse than the margin at level alpha with the given
    power: the least drop that tests as worse (the edge) must lie z_power of those standard errors below it. Solved
    by bisection, independently of detectable_regression's closed form."""
    edge = _bisect(margin, NormalDist().inv_cdf(1 - alpha), n)
    return _bisect(edge, NormalDist().inv_cdf(power), n)


def _bisect(margin: float, z: float, n: int) -> float:
    """The δ >= margin at which δ − z·√(δ(1−δ)/n) = margin."""
    low, high = margin, 1.0
    for _ in range(200):
        middle = (low + high) / 2
        if middle - z * math.sqrt(middle * (1 - middle) / n) < margin:
            low = middle
        else:
            high = middle
    return high


def test_an_unchanged_accuracy_is_not_caught_at_its_margin():
    rng = np.random.default_rng(3)
    record = make_record({"acc": (rng.random(1000) < 0.6).astype(float)})
    (entry,) = compare(record, record, Tolerance(absolute_margin=0.01, alpha=0.05)).entries
    assert entry.standard_error == 0.0 and entry.verdict is Verdict.PASS
    # a candidate that lost a share δ of the documents and gained none: paired variance δ(1−δ)
    assert entry.mde == pytest.approx(_least_churn_mde(0.01, 0.05, 1000), rel=1e-6)
    assert entry.mde > 2 * entry.margin  # the margin itself was printed before


def test_an_unchanged_continuous_metric_takes_the_baselines_standard_error():
    rng = np.random.default_rng(4)
    values = rng.normal(3.0, 2.0, 900)
    record = make_record({"likelihood_diff": values})
    tolerance = Tolerance(absolute_margin=0.05, relative_margin=0.0, alpha=0.05)
    (entry,) = compare(record, record, tolerance).entries
    assert entry.standard_error == 0.0
    z = NormalDist().inv_cdf(1 - 0.05) + NormalDist().inv_cdf(0.8)
    # the bootstrap SE of the baseline's mean is close to its textbook value sd / √n
    expected = 0.05 + z * np.std(values, ddof=1) / math.sqrt(values.size)
    assert entry.mde == pytest.approx(expected, rel=0.08)


def test_the_least_churn_floor_never_lowers_the_observed_mde_and_joins_it_continuously():
    n, margin, alpha = 1000, 0.01, 0.01
    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(0.8)
    floor = _least_churn_mde(margin, alpha, n)
    # a churn well above the floor's variance: the observed standard error decides, as before
    se = math.sqrt(0.15 / n)
    assert detectable_regression(se, margin, alpha, binary_documents=n) == pytest.approx(margin + z * se)
    # one changed document: the floor, not a claim five times stronger than the unchanged entry's
    assert detectable_regression(math.sqrt(1 / n / n), margin, alpha, binary_documents=n) == pytest.approx(floor)
    assert detectable_regression(0.0, margin, alpha, binary_documents=n) == pytest.approx(floor)


def test_many_entries_just_under_alpha_are_not_all_improved():
    # ten categories of 100 documents, each gaining 5 and losing none against a zero margin: McNemar's exact tail
    # 2^-5 = 0.031 is under the task's alpha 0.05 and above alpha / 10 = 0.005
    categories = [f"c{i}" for i in range(10) for _ in range(100)]
    base = np.zeros(1000)
    cand = base.copy()
    for i in range(10):
        cand[100 * i: 100 * i + 5] = 1.0
    tolerance = Tolerance(absolute_margin=0.0, relative_margin=0.0, alpha=0.05)
    comparison = compare(make_record({"acc": base}, categories), make_record({"acc": cand}, categories), tolerance)
    by_category = [e for e in comparison.entries if e.category is not None]
    assert len(by_category) == 10
    unadjusted = 2.0 ** -5
    assert 0.05 / 10 < unadjusted < 0.05
    assert not [e for e in by_category if e.verdict is Verdict.IMPROVED]
    assert all(e.p_value > 0.05 for e in by_category)
    overall = next(e for e in comparison.entries if e.category is None)
    assert overall.verdict is Verdict.IMPROVED  # 50 of 1,000 gained: clear after the adjustment too


def _gains(metric: str, gained: int, task: str, n: int = 2000) -> PoolingStats:
    """A task's pooling statistics: n documents all wrong for the baseline, `gained` of them right for the
    candidate (document keys of its own, so the two tasks' documents are distinct)."""
    candidate = np.zeros(n)
    candidate[:gained] = 1.0
    return PoolingStats.of(metric, np.zeros(n), candidate, "higher", 0.0, [f"{task}-{i:05d}" for i in range(n)])


def test_pooled_entries_just_under_the_level_are_not_all_improved():
    # two pooled metrics, each with 5 documents gained over two tasks (McNemar 2^-5 = 0.031) at a level of 0.05
    stats = {"quiz/a": [_gains("acc", 3, "a"), _gains("acc_norm", 3, "a")],
             "quiz/b": [_gains("acc", 2, "b"), _gains("acc_norm", 2, "b")]}
    entries = pooled_entries("quiz", stats, alpha=0.05, level=0.05)
    assert [e.metric for e in entries] == ["acc", "acc_norm"]
    assert not [e for e in entries if e.verdict is Verdict.IMPROVED]
    # either metric pooled alone (a family of one) is improved: it is the adjustment that holds them back
    [alone] = pooled_entries("quiz", {key: value[:1] for key, value in stats.items()}, alpha=0.05, level=0.05)
    assert alone.verdict is Verdict.IMPROVED and alone.p_value == pytest.approx(2.0 ** -5)
