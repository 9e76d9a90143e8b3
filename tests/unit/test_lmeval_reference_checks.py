"""The checks the parity tests apply to lm-eval's reference files (tests/fixtures/lmeval_references.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.fixtures.cpu_signature import cpu_signature
from tests.fixtures.lmeval_references import (
    ANY_CPU,
    SAME_CPU,
    Tolerance,
    aggregate_bounds,
    loglikelihood_mismatches,
    tolerance_for,
    verdict_check,
    within_tie,
)

TIGHT = Tolerance(absolute=1e-4, relative=0.0)


def sample(doc_id, lls, **metrics):
    return {"doc_id": doc_id, "loglikelihoods": lls, "metrics": metrics}


def document(*choices):
    return SimpleNamespace(choices=choices)


def test_every_document_and_choice_must_be_there():
    samples = [sample(0, [-1.0, -2.0]), sample(1, [-3.0, -4.0])]
    assert loglikelihood_mismatches([[-1.0, -2.0], [-3.0, -4.0]], samples, TIGHT) == []
    assert loglikelihood_mismatches([[-1.0, -2.0]], samples, TIGHT) == ["1 documents scored, the reference has 2"]
    assert loglikelihood_mismatches([[-1.0, -2.0], [-3.0]], samples, TIGHT) == [
        "document 1: 1 log-likelihoods, the reference has 2"]


def test_a_value_outside_its_bound_is_named():
    samples = [sample(7, [-100.0, -2.0])]
    assert loglikelihood_mismatches([[-100.0 + 0.9e-4, -2.0]], samples, TIGHT) == []
    [line] = loglikelihood_mismatches([[-100.0 + 1.1e-4, -2.0]], samples, TIGHT)
    assert line.startswith("document 7 choice 0:")
    # A bound that grows with the magnitude: 1e-4 + 1e-5 * 100 at -100.
    assert loglikelihood_mismatches([[-100.0 + 1.05e-3, -2.0]], samples, Tolerance(1e-4, 1e-5)) == []
    assert loglikelihood_mismatches([[-100.0, -2.0 + 1.3e-4]], samples, Tolerance(1e-4, 1e-5)) != []
    assert loglikelihood_mismatches([[float("nan"), -2.0]], samples, ANY_CPU) != []


def test_a_tie_within_the_bounds_is_recognised_on_the_scale_the_metric_compares():
    assert within_tie([-10.0, -10.00015], [1.0, 1.0], TIGHT)
    assert not within_tie([-10.0, -10.00025], [1.0, 1.0], TIGHT)
    # Per character (acc_norm): -20/10 vs -10/5 is an exact tie though the raw values are far apart.
    assert within_tie([-20.0, -10.0], [10.0, 5.0], TIGHT)
    assert not within_tie([-20.0, -10.0], [1.0, 1.0], TIGHT)


def test_verdicts_must_match_except_where_the_reference_is_within_the_bound_of_a_tie():
    docs = [document("a", "b"), document("a", "b")]
    samples = [sample(0, [-1.0, -5.0], acc=1.0), sample(1, [-3.0, -3.00005], acc=0.0)]
    flipped_both = {"acc": [0.0, 1.0]}
    check = verdict_check(flipped_both, docs, samples, TIGHT)
    assert check.mismatches == ["document 0: acc 0.0 vs lm-eval 1.0"]
    assert check.near_ties == ["1 acc"]
    assert verdict_check({"acc": [1.0, 1.0]}, docs, samples, TIGHT).mismatches == []
    assert verdict_check({"acc": [1.0]}, docs[:1], samples, TIGHT).mismatches == ["1 documents, the reference has 2"]


def test_aggregate_bounds_follow_the_per_document_changes():
    assert aggregate_bounds([1.0, 0.0, 1.0], [1.0, 0.0, 1.0]) == (1e-12, 1e-12)
    value, stderr = aggregate_bounds([1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0])
    assert value == pytest.approx(0.25) and stderr == pytest.approx(1 / 3 ** 0.5)
    with pytest.raises(ValueError):
        aggregate_bounds([1.0], [1.0, 0.0])


def test_the_strict_bound_applies_only_on_the_reference_kernels():
    here = cpu_signature()
    assert tolerance_for({"provenance": {"cpu": dict(here)}}) == SAME_CPU
    other_capability = "AVX2" if here["torch_cpu_capability"] == "AVX512" else "AVX512"
    assert tolerance_for({"provenance": {"cpu": {**here, "torch_cpu_capability": other_capability}}}) == ANY_CPU
    assert tolerance_for({"provenance": {"cpu": {**here, "model_name": "another name"}}}) == SAME_CPU
    assert tolerance_for({"provenance": {}}) == ANY_CPU
