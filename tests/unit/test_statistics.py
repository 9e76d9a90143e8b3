"""Tests for the gate's statistics: pytest_modelbench.gate.evidence (significance, paired) and gate.verdict.

Expected values are hand-computed (binomial sums, normal-table values, the Holm textbook example)
or taken from the reference facts in shared/reference/gate_statistics.md, never from running the code.
"""

import math
from statistics import NormalDist

import numpy as np
import pytest

from pytest_modelbench.gate.evidence.paired import (
    paired_bootstrap,
    paired_standard_error,
    paired_standard_error_of_shares,
)
from pytest_modelbench.gate.evidence.significance import (
    detectable_regression,
    holm_adjust,
    mcnemar_one_sided_pvalue,
    worse_than_margin_pvalue,
)
from pytest_modelbench.gate.verdict import EntryVerdict, Verdict, judge_entry

# Standard normal quantiles from published tables (8 significant digits).
Z_975 = 1.9599640
Z_95 = 1.6448536
Z_995 = 2.5758293
Z_90 = 1.2815516
Z_80 = 0.8416212


# --- McNemar ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lost", "gained", "expected"),
    [
        (0, 0, 1.0),
        (5, 0, 0.5**5),  # P(X >= 5) = 1/32
        (0, 5, 1.0),  # P(X >= 0)
        (9, 1, (1 + 10) / 1024),  # P(X >= 9) = (C(10,10) + C(10,9)) / 2^10
        (3, 3, 42 / 64),  # C(6,3..6) = 20 + 15 + 6 + 1
        (8, 2, (1 + 10 + 45) / 1024),
        # lost + gained = 24 still exact: C(24,18..24) = 134596 + 42504 + 10626 + 2024 + 276 + 24 + 1 (sum 190051).
        (18, 6, 190051 / 2**24),
    ],
)
def test_mcnemar_exact_branch(lost, gained, expected):
    assert mcnemar_one_sided_pvalue(lost, gained) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("lost", "gained", "expected", "tol"),
    [
        # z = (30 - 10 - 1) / sqrt(40); upper normal tail = erfc(z / sqrt 2) / 2.
        (30, 10, 0.5 * math.erfc(19 / math.sqrt(40) / math.sqrt(2)), 1e-12),
        # lost + gained = 25 switches to the normal tail: z = (16 - 9 - 1) / 5 = 1.2; table Phi(1.20) = 0.88493.
        (16, 9, 1 - 0.88493, 1e-5),
        # z = (20 - 5 - 1) / 5 = 2.8; table Phi(2.80) = 0.99744.
        (20, 5, 1 - 0.99744, 1e-5),
        # a gain: z = (9 - 16 - 1) / 5 = -1.6; table Phi(1.60) = 0.94520.
        (9, 16, 0.94520, 1e-5),
    ],
)
def test_mcnemar_normal_branch(lost, gained, expected, tol):
    assert mcnemar_one_sided_pvalue(lost, gained) == pytest.approx(expected, abs=tol)


def test_mcnemar_large_n_is_stable():
    assert 0.0 <= mcnemar_one_sided_pvalue(100_000, 0) < 1e-300
    assert 0.0 < mcnemar_one_sided_pvalue(51_000, 49_000) < 1e-8
    assert mcnemar_one_sided_pvalue(49_000, 51_000) == pytest.approx(1.0)
    assert mcnemar_one_sided_pvalue(np.int64(9), np.int64(1)) == pytest.approx(11 / 1024)


def test_mcnemar_rejects_bad_counts():
    with pytest.raises(ValueError):
        mcnemar_one_sided_pvalue(-1, 3)
    with pytest.raises(TypeError):
        mcnemar_one_sided_pvalue(1.5, 3)


# --- Holm ----------------------------------------------------------------------------------------


def test_holm_textbook_example():
    # Sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max(0.06, 0.04) = 0.06.
    adjusted = holm_adjust([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_is_monotone_in_rank_and_not_below_raw():
    raw = list(np.random.default_rng(7).uniform(0, 0.2, size=30))
    adjusted = holm_adjust(raw)
    by_rank = [adjusted[i] for i in np.argsort(raw)]
    assert all(a <= b for a, b in zip(by_rank, by_rank[1:]))
    assert all(a >= p for a, p in zip(adjusted, raw))


def test_holm_caps_at_one():
    assert holm_adjust([0.5, 0.6, 0.9]) == [1.0, 1.0, 1.0]
    assert holm_adjust([0.4, 0.001]) == pytest.approx([0.4, 0.002])


def test_holm_edge_cases():
    assert holm_adjust([]) == []
    assert holm_adjust([0.02]) == [0.02]
    assert holm_adjust([0.01, 0.01]) == [0.02, 0.02]
    with pytest.raises(ValueError):
        holm_adjust([0.1, 1.5])
    with pytest.raises(ValueError):
        holm_adjust([float("nan")])
    with pytest.raises(ValueError):
        holm_adjust([0.1, 0.2], [1.0, 0.0])
    with pytest.raises(ValueError):
        holm_adjust([0.1, 0.2], [1.0])


def test_weighted_holm_by_hand():
    # weights 1/2, 1/4, 1/4 (sum 1). Order by p / w: 0.004 / 0.25 = 0.016, 0.01 / 0.5 = 0.02, 0.03 / 0.25 = 0.12.
    #   first  (p 0.004, w 1/4): 0.004 × 1 / 0.25 = 0.016
    #   second (p 0.010, w 1/2): 0.010 × 0.75 / 0.5 = 0.015 -> kept monotone at 0.016
    #   third  (p 0.030, w 1/4): 0.030 × 0.25 / 0.25 = 0.030
    assert holm_adjust([0.01, 0.004, 0.03], [0.5, 0.25, 0.25]) == pytest.approx([0.016, 0.016, 0.03])
    # equal weights of any scale are plain Holm
    assert holm_adjust([0.01, 0.04, 0.03, 0.005], [3.0] * 4) == pytest.approx(holm_adjust([0.01, 0.04, 0.03, 0.005]))


def test_weighted_holm_controls_the_family_wise_error_by_simulation():
    # 6 true null hypotheses with uniform p-values: P(any adjusted p < 0.05) <= 0.05 whatever the weights.
    rng = np.random.default_rng(5)
    weights = [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]
    rejections = sum(min(holm_adjust(list(rng.uniform(size=6)), weights)) < 0.05 for _ in range(4000))
    assert rejections / 4000 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)


# --- Paired bootstrap ----------------------------------------------------------------------------


def test_bootstrap_interval_covers_true_delta_about_95_percent():
    true_delta = 0.3
    rng = np.random.default_rng(12345)
    covered = 0
    repetitions = 200
    for rep in range(repetitions):
        baseline = rng.normal(0.0, 1.0, size=100)
        # Shared per-document component, as for two models scored on the same documents.
        candidate = baseline + rng.normal(true_delta, 0.5, size=100)
        result = paired_bootstrap(baseline, candidate, n_resamples=1000, seed=rep)
        covered += result.low <= true_delta <= result.high
    assert 0.90 * repetitions <= covered <= 0.99 * repetitions


def test_bootstrap_is_paired():
    # Huge shared variance, tiny constant shift: only a paired resample sees the shift clearly.
    rng = np.random.default_rng(3)
    baseline = rng.normal(0, 100, size=300)
    candidate = baseline + 0.01
    result = paired_bootstrap(baseline, candidate, n_resamples=500)
    assert result.low == pytest.approx(0.01) and result.high == pytest.approx(0.01)
    assert result.standard_error < 1e-9


def test_bootstrap_of_a_function_of_the_mean_is_paired():
    rng = np.random.default_rng(4)
    baseline = rng.normal(0, 100, size=201)
    candidate = baseline + 0.5  # the mean shifts by exactly 0.5 on every paired resample
    result = paired_bootstrap(baseline, candidate, of_mean=lambda m: 2 * m, n_resamples=200)
    assert result.low == pytest.approx(1.0) and result.high == pytest.approx(1.0)


def test_bootstrap_is_deterministic_given_seed():
    rng = np.random.default_rng(11)
    baseline = rng.normal(size=150)
    candidate = baseline + rng.normal(0.1, 1.0, size=150)
    first = paired_bootstrap(baseline, candidate, seed=5)
    assert paired_bootstrap(baseline, candidate, seed=5) == first
    assert paired_bootstrap(baseline, candidate, seed=6) != first


def test_bootstrap_delta_is_full_data_difference():
    baseline = np.array([0.0, 1.0, 2.0, 3.0])
    candidate = np.array([1.0, 1.0, 4.0, 3.0])
    assert paired_bootstrap(baseline, candidate, n_resamples=10).delta == pytest.approx(0.75)
    # distance from 1.5: |2.25 - 1.5| - |1.5 - 1.5|
    distance = paired_bootstrap(baseline, candidate, of_mean=lambda m: np.abs(m - 1.5), n_resamples=10)
    assert distance.delta == pytest.approx(0.75)


def test_bootstrap_standard_error_matches_the_closed_form():
    rng = np.random.default_rng(21)
    baseline = rng.normal(size=400)
    candidate = baseline + rng.normal(1.0, 1.0, size=400)
    result = paired_bootstrap(baseline, candidate, n_resamples=2000)
    # SE of a mean difference: sd(diff) / sqrt(n) (the bootstrap's uses n, not n - 1, in the variance)
    diff = candidate - baseline
    assert result.standard_error == pytest.approx(np.std(diff) / math.sqrt(400), rel=0.05)
    assert result.low < diff.mean() < result.high


def test_bootstrap_identical_arrays():
    x = np.random.default_rng(1).normal(size=50)
    result = paired_bootstrap(x, x.copy())
    assert (result.delta, result.low, result.high, result.standard_error) == (0.0, 0.0, 0.0, 0.0)
    # the baseline's own mean still varies over the resamples: about sd / √n
    assert result.baseline_standard_error == pytest.approx(np.std(x, ddof=1) / np.sqrt(50), rel=0.1)


def test_bootstrap_of_the_distance_from_an_ideal_point_by_hand():
    # Every resample of these two arrays has the same means (constant arrays): no spread, exact delta.
    baseline, candidate = np.full(50, 0.45), np.full(50, 0.65)
    result = paired_bootstrap(baseline, candidate, of_mean=lambda m: -np.abs(m - 0.5), n_resamples=100)
    assert result.delta == pytest.approx(-(0.15 - 0.05))
    assert result.standard_error == pytest.approx(0.0, abs=1e-12)
    # 0/1 outcomes: the resampled distances follow the independent loop below with the same generator
    rng = np.random.default_rng(8)
    baseline = (rng.random(37) < 0.5).astype(float)
    candidate = (rng.random(37) < 0.7).astype(float)
    result = paired_bootstrap(baseline, candidate, of_mean=lambda m: -np.abs(m - 0.5), n_resamples=300, seed=4)
    draws = np.random.Generator(np.random.PCG64(4)).integers(0, 37, size=(300, 37))
    loop = [abs(baseline[i].mean() - 0.5) - abs(candidate[i].mean() - 0.5) for i in draws]
    assert result.standard_error == pytest.approx(np.std(loop, ddof=1))


def test_bootstrap_accepts_binary_outcomes():
    baseline = np.array([True] * 80 + [False] * 20)
    candidate = baseline.copy()
    candidate[:30] = False  # 30 documents flip right -> wrong
    result = paired_bootstrap(baseline, candidate, n_resamples=500)
    assert result.delta == pytest.approx(-0.30)
    assert result.high < 0


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError):
        paired_bootstrap(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError):
        paired_bootstrap(np.zeros(0), np.zeros(0))
    with pytest.raises(ValueError):
        paired_bootstrap(np.zeros(3), np.zeros(3), confidence=1.0)
    with pytest.raises(ValueError):
        paired_bootstrap(np.zeros(3), np.zeros(3), n_resamples=0)


# --- Detectable regression, one-sided p-values and standard error -----------------------------------


@pytest.mark.parametrize(
    ("alpha", "power", "expected"),
    [
        (0.05, 0.8, Z_95 + Z_80),  # 2.486475
        (0.025, 0.8, Z_975 + Z_80),  # 2.801585, the "2.8 SE" of a two-sided test at 0.05
        (0.05, 0.5, Z_95),  # z_0.5 = 0
        (0.005, 0.9, Z_995 + Z_90),
    ],
)
def test_detectable_regression_matches_normal_table(alpha, power, expected):
    assert detectable_regression(1.0, 0.0, alpha, power) == pytest.approx(expected, abs=1e-6)
    assert detectable_regression(0.5, 0.02, alpha, power) == pytest.approx(0.02 + 0.5 * expected, abs=1e-6)
    assert detectable_regression(0.0, 0.02, alpha, power) == 0.02


@pytest.mark.parametrize(
    ("n", "points", "rounding"),
    # Reference: discordance 0.2 on CrowS-Pairs -> all 1,508 about 3.2 points, disability (60) 16, at two-sided
    # 0.05 (one-sided 0.025) and no margin; tolerance is half a unit in the last digit the reference states.
    [(1508, 3.2, 0.05), (516, 5.5, 0.05), (262, 7.7, 0.05), (60, 16, 0.5)],
)
def test_detectable_regression_reproduces_reference_crows_pairs_figures(n, points, rounding):
    assert 100 * detectable_regression(math.sqrt(0.2 / n), 0.0, 0.025) == pytest.approx(points, abs=rounding)


def test_detectable_regression_rejects_bad_arguments():
    with pytest.raises(ValueError):
        detectable_regression(-0.1, 0.01)
    with pytest.raises(ValueError):
        detectable_regression(0.1, -0.01)
    with pytest.raises(ValueError):
        detectable_regression(0.1, 0.01, alpha=0.0)
    with pytest.raises(ValueError):
        detectable_regression(0.1, 0.01, power=1.0)


def test_worse_than_margin_pvalue_by_table():
    # delta -0.03, margin 0.01, SE 0.01: z = -2.0; table Phi(-2.00) = 0.02275
    assert worse_than_margin_pvalue(-0.03, 0.01, 0.01) == pytest.approx(0.02275, abs=1e-5)
    # at the margin exactly: 1/2; inside it: large
    assert worse_than_margin_pvalue(-0.01, 0.004, 0.01) == pytest.approx(0.5)
    assert worse_than_margin_pvalue(0.0, 0.004, 0.01) == pytest.approx(0.99379, abs=1e-5)  # Phi(2.5)
    # SE 0: the data decide outright
    assert worse_than_margin_pvalue(-0.02, 0.0, 0.01) == 0.0
    assert worse_than_margin_pvalue(-0.01, 0.0, 0.01) == 1.0
    with pytest.raises(ValueError):
        worse_than_margin_pvalue(0.0, -1.0, 0.01)


def test_non_inferiority_test_keeps_its_size_at_the_margin_by_simulation():
    # Paired 0/1 outcomes, true change exactly -margin: a one-sided test at 0.05 blocks about 5% of the time; at
    # half the margin far less. Simulated here independently of the gate's own code path.
    rng = np.random.default_rng(17)
    n, margin, discordant = 2000, 0.01, 0.15
    blocked = {}
    for change in (-margin, -margin / 2):
        p_lost = (discordant - change) / 2  # P(lost) - P(gained) = -change
        count = 0
        for _ in range(2000):
            u = rng.random(n)
            diff = np.where(u < p_lost, -1.0, np.where(u < discordant, 1.0, 0.0))
            se = np.std(diff, ddof=1) / math.sqrt(n)
            count += worse_than_margin_pvalue(diff.mean(), se, margin) < 0.05
        blocked[change] = count / 2000
    assert 0.035 <= blocked[-margin] <= 0.065
    assert blocked[-margin / 2] <= 0.02


def test_paired_standard_error_hand_computed():
    # diff = [-1, 0, 0, 0, 1]: mean 0, sample variance 2/4, SE = sqrt(0.5 / 5).
    baseline = np.array([1, 1, 1, 1, 0])
    candidate = np.array([0, 1, 1, 1, 1])
    assert paired_standard_error(candidate - baseline) == pytest.approx(math.sqrt(0.1))


def test_paired_standard_error_matches_discordance_formula():
    # 100 b + 100 c among 1000 documents: mean 0, sum of squares 200 -> SE = sqrt(200 / 999 / 1000).
    baseline = np.array([1] * 100 + [0] * 100 + [1] * 800)
    candidate = np.array([0] * 100 + [1] * 100 + [1] * 800)
    se = paired_standard_error(candidate - baseline)
    assert se == pytest.approx(math.sqrt(200 / 999 / 1000))
    assert se == pytest.approx(math.sqrt(0.2 / 1000), rel=1e-3)  # reference: SE ~ sqrt(d / n)


def test_the_paired_standard_errors_three_forms_agree():
    """From the differences, from singleton clusters (CR1 with one document a cluster) and from the shares of a
    0/1 difference: 30 lost, 10 gained of 400 documents is one standard error, √((0.1 − 0.05²) / 399)."""
    d = np.r_[-np.ones(30), np.ones(10), np.zeros(360)]
    expected = math.sqrt((40 / 400 - (20 / 400) ** 2) / 399)
    assert paired_standard_error(d) == pytest.approx(expected, rel=1e-12)
    assert paired_standard_error(d, np.arange(d.size)) == pytest.approx(expected, rel=1e-12)
    assert paired_standard_error_of_shares(-20 / 400, 40 / 400, 400) == pytest.approx(expected, rel=1e-12)


def test_paired_standard_error_degenerate():
    assert paired_standard_error(np.array([-1])) == 0.0
    assert paired_standard_error(np.array([])) == 0.0
    assert paired_standard_error(np.zeros(3)) == 0.0


# --- judge_entry ---------------------------------------------------------------------------------------


def _judge(delta, se, margin=0.02, alpha=0.05, p_worse=None, p_better=None):
    return judge_entry(
        delta,
        p_worse=worse_than_margin_pvalue(delta, se, margin) if p_worse is None else p_worse,
        p_better=worse_than_margin_pvalue(-delta, se, margin) if p_better is None else p_better,
        standard_error=se, margin=margin, alpha=alpha, mde=detectable_regression(se, margin, alpha),
    )


def test_judge_unchanged_model_passes():
    for margin in (0.0, 0.02):
        result = _judge(0.0, 0.0, margin)
        assert result == EntryVerdict(Verdict.PASS, delta=0.0, p_value=1.0, mde=margin, margin=margin)


def test_judge_big_regression_and_improvement():
    assert _judge(-0.14, 0.012).verdict is Verdict.REGRESSED
    assert _judge(0.14, 0.012).verdict is Verdict.IMPROVED


def test_judge_rule_boundaries():
    z = Z_95
    # p_worse just below alpha: regressed; at alpha: not (and worse than the margin: inconclusive)
    assert _judge(-0.05, 0.01, p_worse=0.0499).verdict is Verdict.REGRESSED
    assert _judge(-0.05, 0.01, p_worse=0.05).verdict is Verdict.INCONCLUSIVE
    # significantly worse than zero but inside the margin, well measured: the data show it within -> PASS
    assert _judge(-0.01, 0.003).verdict is Verdict.PASS
    # the one-sided bound delta - z SE against -margin decides pass / inconclusive
    assert _judge(0.0, 0.02 / z - 1e-6).verdict is Verdict.PASS
    assert _judge(0.0, 0.02 / z + 1e-6).verdict is Verdict.INCONCLUSIVE
    # a tiny sample whose documents all moved the same way (SE 0) is never a pass; the caller's p decides the rest
    assert _judge(-1.0, 0.0, p_worse=0.25).verdict is Verdict.INCONCLUSIVE
    assert _judge(1.0, 0.0, p_better=0.25).verdict is Verdict.PASS


def test_judge_rejects_bad_arguments():
    with pytest.raises(ValueError):
        _judge(0.0, 0.01, margin=-0.01)
    with pytest.raises(ValueError):
        _judge(0.0, 0.01, p_worse=1.5)
    with pytest.raises(ValueError):
        _judge(float("nan"), 0.01)
    with pytest.raises(ValueError):
        _judge(0.0, 0.01, alpha=0.0)


def test_the_tiny_levels_of_a_wide_alpha_split_are_judged_without_error():
    """alpha 1e-9 shared by thousands of tasks at uneven weights gives levels where 1 − level rounds to 1 (the
    normal quantile of 1.0 raised StatisticsError)."""
    level = 1e-9 * 1e-6 / 1e6 / 1_000
    low, high = 0.0, 40.0  # z with P(Z > z) = level, by bisection on the normal tail
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if 0.5 * math.erfc(middle / math.sqrt(2)) > level else (low, middle)
    assert detectable_regression(0.01, 0.02, level) == pytest.approx(0.02 + (NormalDist().inv_cdf(0.8) + low) * 0.01)
    assert judge_entry(-0.5, p_worse=0.0, p_better=1.0, standard_error=0.01, margin=0.02, alpha=level, mde=0.1).verdict \
        is Verdict.REGRESSED
    assert judge_entry(0.0, p_worse=1.0, p_better=1.0, standard_error=0.01, margin=0.02, alpha=level, mde=0.1).verdict \
        is Verdict.INCONCLUSIVE
