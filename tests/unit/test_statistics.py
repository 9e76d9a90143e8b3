"""Tests for pytest_modelbench.gate.statistics.

Expected values are hand-computed (binomial sums, normal-table values, the Holm textbook example)
or taken from the reference facts in shared/reference/gate_statistics.md, never from running the code.
"""

import math

import numpy as np
import pytest

from pytest_modelbench.gate.statistics import (
    BootstrapResult,
    Judgement,
    Verdict,
    holm_adjust,
    judge,
    mcnemar_pvalue,
    minimum_detectable_effect,
    paired_binary_standard_error,
    paired_bootstrap,
)

# Standard normal quantiles from published tables (8 significant digits).
Z_975 = 1.9599640
Z_95 = 1.6448536
Z_995 = 2.5758293
Z_90 = 1.2815516
Z_80 = 0.8416212


# --- McNemar -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 0, 1.0),
        (0, 5, 2 * 0.5**5),  # P(X <= 0) = 1/32
        (5, 0, 2 * 0.5**5),  # symmetric in b, c
        (1, 9, 2 * (1 + 10) / 1024),  # P(X <= 1) = (C(10,0) + C(10,1)) / 2^10
        (3, 3, 1.0),  # 2 * 42/64 > 1, capped
        (2, 8, 2 * (1 + 10 + 45) / 1024),  # C(10,0..2)
        # b + c = 24 still exact: C(24,0..6) = 1, 24, 276, 2024, 10626, 42504, 134596 (sum 190051).
        (6, 18, 2 * 190051 / 2**24),
    ],
)
def test_mcnemar_exact_branch(b, c, expected):
    assert mcnemar_pvalue(b, c) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("b", "c", "expected", "tol"),
    [
        # chi2 = 19^2 / 40 = 9.025; 1-dof survival = erfc(sqrt(chi2 / 2)).
        (10, 30, math.erfc(math.sqrt(9.025 / 2)), 1e-12),
        # b + c = 25 switches to chi-square: chi2 = 6^2/25 = 1.44 = 1.2^2, so p = 2 * (1 - Phi(1.20)).
        # Normal table: Phi(1.20) = 0.88493 -> p = 0.23014.
        (9, 16, 0.23014, 1e-4),
        # chi2 = 14^2/25 = 7.84 = 2.8^2; table Phi(2.80) = 0.99744 -> p = 0.00511.
        (5, 20, 0.00511, 1e-4),
    ],
)
def test_mcnemar_chi_square_branch(b, c, expected, tol):
    assert mcnemar_pvalue(b, c) == pytest.approx(expected, abs=tol)


def test_mcnemar_chi_square_differs_from_exact_at_boundary():
    # (6, 18) with chi-square would be erfc(sqrt(121/24/2)) = 0.0248, not the exact 0.02266.
    assert mcnemar_pvalue(6, 18) != pytest.approx(math.erfc(math.sqrt(121 / 24 / 2)), rel=1e-3)


def test_mcnemar_balanced_large_counts_give_one():
    assert mcnemar_pvalue(50, 50) == 1.0
    assert mcnemar_pvalue(50_000, 50_000) == 1.0
    # |b - c| = 1 is no evidence at all after the continuity correction.
    assert mcnemar_pvalue(12, 13) == 1.0


def test_mcnemar_large_n_is_stable():
    p = mcnemar_pvalue(0, 100_000)
    assert 0.0 <= p < 1e-300
    assert 0.0 < mcnemar_pvalue(49_000, 51_000) < 1e-8
    assert mcnemar_pvalue(np.int64(1), np.int64(9)) == pytest.approx(22 / 1024)


def test_mcnemar_rejects_bad_counts():
    with pytest.raises(ValueError):
        mcnemar_pvalue(-1, 3)
    with pytest.raises(TypeError):
        mcnemar_pvalue(1.5, 3)


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


def test_bootstrap_generic_statistic_is_paired():
    rng = np.random.default_rng(4)
    baseline = rng.normal(0, 100, size=201)
    candidate = baseline + 0.5  # median shifts by exactly 0.5 on every paired resample
    result = paired_bootstrap(baseline, candidate, statistic=np.median, n_resamples=200)
    assert result.low == pytest.approx(0.5) and result.high == pytest.approx(0.5)


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
    median = paired_bootstrap(baseline, candidate, statistic=np.median, n_resamples=10)
    assert median.delta == pytest.approx(2.0 - 1.5)  # medians of [1, 1, 3, 4] and [0, 1, 2, 3]


def test_bootstrap_p_value_small_for_large_shift_never_zero():
    rng = np.random.default_rng(21)
    baseline = rng.normal(size=200)
    candidate = baseline + rng.normal(1.0, 1.0, size=200)
    result = paired_bootstrap(baseline, candidate, n_resamples=999)
    # No resampled delta reaches 0 -> p = 2 * (0 + 1) / (999 + 1).
    assert result.p_value == pytest.approx(0.002)
    assert result.low > 0.7 and result.high < 1.3


def test_bootstrap_p_value_large_for_no_shift():
    rng = np.random.default_rng(22)
    baseline = rng.normal(size=200)
    noise = rng.normal(size=200)
    candidate = baseline + (noise - noise.mean())  # observed mean difference exactly 0
    result = paired_bootstrap(baseline, candidate)
    assert result.p_value > 0.8
    assert result.low < 0 < result.high


def test_bootstrap_identical_arrays():
    x = np.random.default_rng(1).normal(size=50)
    assert paired_bootstrap(x, x.copy()) == BootstrapResult(
        delta=0.0, low=0.0, high=0.0, p_value=1.0, standard_error=0.0
    )


def test_bootstrap_generic_statistic_uses_same_resamples_as_vectorised_mean():
    rng = np.random.default_rng(8)
    baseline = rng.normal(size=37)  # odd length, several chunks would not matter either
    candidate = baseline + rng.normal(0.2, 1.0, size=37)
    fast = paired_bootstrap(baseline, candidate, n_resamples=300, seed=4)
    slow = paired_bootstrap(
        baseline, candidate, statistic=lambda x: float(np.mean(x)), n_resamples=300, seed=4
    )
    assert slow.low == pytest.approx(fast.low)
    assert slow.high == pytest.approx(fast.high)
    assert slow.standard_error == pytest.approx(fast.standard_error)


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


# --- Minimum detectable effect and standard error ------------------------------------------------


@pytest.mark.parametrize(
    ("alpha", "power", "expected"),
    [
        (0.05, 0.8, Z_975 + Z_80),  # 2.801585
        (0.05, 0.5, Z_975),  # z_0.5 = 0
        (0.01, 0.9, Z_995 + Z_90),  # 3.857381
        (0.10, 0.8, Z_95 + Z_80),  # 2.486475
        (0.05, 0.975, 2 * Z_975),
    ],
)
def test_mde_matches_normal_table(alpha, power, expected):
    assert minimum_detectable_effect(1.0, alpha, power) == pytest.approx(expected, abs=1e-6)


def test_mde_default_is_about_2_8_se():
    assert minimum_detectable_effect(0.5) == pytest.approx(0.5 * 2.801585, abs=1e-6)
    assert minimum_detectable_effect(0.0) == 0.0


@pytest.mark.parametrize(
    ("n", "points", "rounding"),
    # Reference: discordance 0.2 on CrowS-Pairs -> all 1,508 about 3.2 points, disability (60) 16;
    # tolerance is half a unit in the last digit the reference states.
    [(1508, 3.2, 0.05), (516, 5.5, 0.05), (262, 7.7, 0.05), (60, 16, 0.5)],
)
def test_mde_reproduces_reference_crows_pairs_figures(n, points, rounding):
    mde_points = 100 * minimum_detectable_effect(math.sqrt(0.2 / n))
    assert mde_points == pytest.approx(points, abs=rounding)


def test_mde_rejects_bad_arguments():
    with pytest.raises(ValueError):
        minimum_detectable_effect(-0.1)
    with pytest.raises(ValueError):
        minimum_detectable_effect(0.1, alpha=0.0)
    with pytest.raises(ValueError):
        minimum_detectable_effect(0.1, power=1.0)


def test_paired_binary_standard_error_hand_computed():
    # diff = [-1, 0, 0, 0, 1]: mean 0, sample variance 2/4, SE = sqrt(0.5 / 5).
    baseline = np.array([1, 1, 1, 1, 0])
    candidate = np.array([0, 1, 1, 1, 1])
    assert paired_binary_standard_error(baseline, candidate) == pytest.approx(math.sqrt(0.1))


def test_paired_binary_standard_error_matches_discordance_formula():
    # 100 b + 100 c among 1000 documents: mean 0, sum of squares 200 -> SE = sqrt(200 / 999 / 1000).
    baseline = np.array([1] * 100 + [0] * 100 + [1] * 800)
    candidate = np.array([0] * 100 + [1] * 100 + [1] * 800)
    se = paired_binary_standard_error(baseline, candidate)
    assert se == pytest.approx(math.sqrt(200 / 999 / 1000))
    assert se == pytest.approx(math.sqrt(0.2 / 1000), rel=1e-3)  # reference: SE ~ sqrt(d / n)


def test_paired_binary_standard_error_degenerate():
    assert paired_binary_standard_error(np.array([1]), np.array([0])) == 0.0
    assert paired_binary_standard_error(np.array([]), np.array([])) == 0.0
    same = np.array([True, False, True])
    assert paired_binary_standard_error(same, same) == 0.0


# --- judge ---------------------------------------------------------------------------------------


def _binary_case(right_to_wrong: int, wrong_to_right: int, concordant: int) -> Judgement:
    """Judge a binary metric with the given discordant counts, as a gate would (margin 2 points)."""
    baseline = np.array([1] * right_to_wrong + [0] * wrong_to_right + [1] * concordant)
    candidate = np.array([0] * right_to_wrong + [1] * wrong_to_right + [1] * concordant)
    return judge(
        float(candidate.mean() - baseline.mean()),
        p_value=mcnemar_pvalue(right_to_wrong, wrong_to_right),
        standard_error=paired_binary_standard_error(baseline, candidate),
        margin=0.02,
    )


def test_judge_unchanged_model_passes():
    outcomes = np.random.default_rng(0).integers(0, 2, size=500)
    for margin in (0.0, 0.02):
        result = judge(
            0.0,
            p_value=mcnemar_pvalue(0, 0),
            standard_error=paired_binary_standard_error(outcomes, outcomes),
            margin=margin,
        )
        assert result == Judgement(Verdict.PASS, delta=0.0, p_value=1.0, mde=0.0, margin=margin)


def test_judge_big_regression():
    result = _binary_case(right_to_wrong=150, wrong_to_right=10, concordant=840)
    assert result.verdict is Verdict.REGRESSED
    assert result.delta == pytest.approx(-0.14)


def test_judge_big_improvement():
    result = _binary_case(right_to_wrong=10, wrong_to_right=150, concordant=840)
    assert result.verdict is Verdict.IMPROVED


def test_judge_tiny_n_is_inconclusive_and_reports_mde():
    # n = 10, diff = [-1, -1, -1, +1, 0 x 6]: mean -0.2, sample variance 3.6 / 9 = 0.4, SE = 0.2.
    result = _binary_case(right_to_wrong=3, wrong_to_right=1, concordant=6)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.p_value == pytest.approx(2 * 5 / 16)
    assert result.mde == pytest.approx(0.2 * 2.801585, abs=1e-6)


def test_judge_tiny_n_with_zero_sample_se_is_not_a_pass():
    # Two documents both flipped right -> wrong: sample SE is 0, p = 0.5, delta = -1.
    result = _binary_case(right_to_wrong=2, wrong_to_right=0, concordant=0)
    assert result.verdict is Verdict.INCONCLUSIVE


def test_judge_large_unchanged_sample_passes_despite_noise():
    # 40 flips each way among 5000 documents: no net change, MDE = 2.8 * sqrt(80/4999/5000) ~ 0.5 points.
    result = _binary_case(right_to_wrong=40, wrong_to_right=40, concordant=4920)
    assert result.verdict is Verdict.PASS


def test_judge_rule_boundaries():
    # Significant but within the margin, well powered -> PASS.
    assert judge(-0.01, p_value=0.001, standard_error=0.003, margin=0.02).verdict is Verdict.PASS
    # p exactly alpha is not significant; worse than the margin -> INCONCLUSIVE.
    assert (
        judge(-0.05, p_value=0.05, standard_error=0.001, margin=0.02).verdict
        is Verdict.INCONCLUSIVE
    )
    # Not significant, within the margin, but underpowered (MDE 0.028 > 0.02) -> INCONCLUSIVE.
    assert judge(0.0, p_value=1.0, standard_error=0.01, margin=0.02).verdict is Verdict.INCONCLUSIVE
    # Same, with a wider margin (MDE 0.028 <= 0.03) -> PASS.
    assert judge(0.0, p_value=1.0, standard_error=0.01, margin=0.03).verdict is Verdict.PASS
    # Significantly worse but only by less than the margin and underpowered -> INCONCLUSIVE.
    assert (
        judge(-0.015, p_value=0.01, standard_error=0.01, margin=0.02).verdict
        is Verdict.INCONCLUSIVE
    )


def test_judge_with_holm_adjusted_bootstrap_p_values():
    rng = np.random.default_rng(99)
    categories = {
        "regressed": -1.0,
        "unchanged": 0.0,
    }
    results = {}
    for name, shift in categories.items():
        baseline = rng.normal(size=400)
        noise = rng.normal(0, 0.2, size=400)
        results[name] = paired_bootstrap(baseline, baseline + shift + noise - noise.mean())
    adjusted = holm_adjust([r.p_value for r in results.values()])
    verdicts = {
        name: judge(r.delta, p_value=p, standard_error=r.standard_error, margin=0.1).verdict
        for (name, r), p in zip(results.items(), adjusted)
    }
    assert verdicts == {"regressed": Verdict.REGRESSED, "unchanged": Verdict.PASS}


def test_judge_rejects_bad_arguments():
    with pytest.raises(ValueError):
        judge(0.0, p_value=0.5, standard_error=0.01, margin=-0.01)
    with pytest.raises(ValueError):
        judge(0.0, p_value=1.5, standard_error=0.01, margin=0.01)
    with pytest.raises(ValueError):
        judge(float("nan"), p_value=0.5, standard_error=0.01, margin=0.01)
    with pytest.raises(ValueError):
        judge(0.0, p_value=0.5, standard_error=-1.0, margin=0.01)
