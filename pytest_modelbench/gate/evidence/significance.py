"""Significance against a margin: one-sided p-values (normal, Student's t, McNemar's exact or approximate tail), Holm's
weighted step-down adjustment, and the smallest regression a test catches with a given power.

Every delta is oriented so that positive is better; a margin is how much worse an entry may be before it counts.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from statistics import NormalDist

# Below this many discordant documents McNemar uses the exact binomial test.
_EXACT_MCNEMAR_BELOW = 25


def mcnemar_one_sided_pvalue(lost: int, gained: int) -> float:
    """One-sided McNemar p-value of "the candidate loses more documents than it gains".

    lost: documents good for the baseline and bad for the candidate; gained: the reverse.
    P(X >= lost) for X ~ Binomial(lost + gained, 1/2), exact below 25 discordant documents, otherwise the
    normal approximation with continuity correction.
    """
    lost, gained = operator.index(lost), operator.index(gained)
    if lost < 0 or gained < 0:
        raise ValueError(f"discordant counts must be >= 0, got lost={lost}, gained={gained}")
    n = lost + gained
    if n == 0:
        return 1.0
    if n < _EXACT_MCNEMAR_BELOW:
        tail = sum(math.comb(n, i) for i in range(lost, n + 1))
        # Integer true division is exact-then-rounded, so no overflow of 2**n as a float.
        return tail / 2**n
    z = (lost - gained - 1) / math.sqrt(n)
    return 0.5 * math.erfc(z / math.sqrt(2))


def holm_adjust(p_values: Sequence[float], weights: Sequence[float] | None = None) -> list[float]:
    """Holm's step-down adjusted p-values, weighted (Holm 1979), in the input order; reject where adjusted < alpha.

    Hypothesis i is tested at alpha × w_i / (sum of the weights of the hypotheses not yet rejected), in the order of
    p_i / w_i: a rejected hypothesis passes its share of alpha on to the others. Equal weights give plain Holm.
    The family-wise error rate is at most alpha whatever the dependence between the tests.
    """
    if any(not 0 <= p <= 1 for p in p_values):
        raise ValueError(f"p-values must lie in [0, 1], got {list(p_values)}")
    weights = [1.0] * len(p_values) if weights is None else [float(w) for w in weights]
    if len(weights) != len(p_values) or any(not w > 0 for w in weights):
        raise ValueError(f"need one positive weight per p-value, got {weights} for {len(p_values)} p-values")
    adjusted = [0.0] * len(p_values)
    remaining = sum(weights)
    running = 0.0
    for i in sorted(range(len(p_values)), key=lambda i: p_values[i] / weights[i]):
        running = max(running, min(1.0, p_values[i] * remaining / weights[i]))
        adjusted[i] = running
        remaining -= weights[i]
    return adjusted


def worse_than_margin_pvalue(delta: float, standard_error: float, margin: float, df: int | None = None) -> float:
    """One-sided p-value of "delta >= -margin" (not worse than the margin) against "delta < -margin".

    Normal approximation: Phi((delta + margin) / SE); with `df` (a cluster-robust SE over G clusters: G − 1), Student's
    t with df degrees of freedom instead, as a few clusters' SE is itself uncertain. With SE 0 (every document moved
    alike) the data decide outright: 0 when delta < -margin, else 1. For "better than +margin" pass (-delta).
    """
    if standard_error < 0 or margin < 0:
        raise ValueError(f"standard_error and margin must be >= 0, got {standard_error}, {margin}")
    if standard_error == 0:
        return 0.0 if delta < -margin else 1.0
    if df is not None:
        return student_t_cdf((delta + margin) / standard_error, df)
    return NormalDist().cdf((delta + margin) / standard_error)


def student_t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with a whole number df >= 1 of degrees of freedom, from the finite series of
    P(|T| < |x|) in θ = arctan(|x| / √df) (Abramowitz & Stegun 26.7.3-4): odd df (2/π)(θ + sin θ Σ_k a_k cos^(2k+1) θ),
    even df sin θ Σ_k b_k cos^(2k) θ, with the terms' coefficients built up as ratios."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan(abs(x) / math.sqrt(df))
    sine, cosine = math.sin(theta), math.cos(theta)
    squared = cosine * cosine
    if df % 2:
        term, total = cosine, 0.0
        for k in range(1, (df - 1) // 2 + 1):  # the series of cos^(2k-1) θ, k = 1 .. (df−1)/2
            total += term
            term *= squared * (2 * k) / (2 * k + 1)
        inside = 2 / math.pi * (theta + sine * total) if df > 1 else 2 * theta / math.pi
    else:
        term, total = 1.0, 0.0
        for k in range(df // 2):  # the series of cos^(2k) θ, k = 0 .. df/2 − 1
            total += term
            term *= squared * (2 * k + 1) / (2 * k + 2)
        inside = sine * total
    inside = min(1.0, inside)
    return 0.5 + inside / 2 if x >= 0 else 0.5 - inside / 2


def detectable_regression(
    standard_error: float, margin: float, alpha: float = 0.05, power: float = 0.8, *,
    binary_documents: int | None = None, baseline_standard_error: float = 0.0,
) -> float:
    """Smallest true regression that a one-sided test of "not worse than -margin" at level alpha catches with the
    given power: margin + (z_{1-alpha} + z_power) × SE (positive, in the units of delta), where SE is the standard
    error a candidate regressed by that much would have, not necessarily the observed one:

    binary_documents: for a mean of 0/1 outcomes over that many documents, SE is never below √(δ(1−δ)/n) at the
        regression δ: a candidate whose mean fell by δ changed at least a share δ of its documents, so its paired
        differences have a variance of at least δ(1−δ) (the fewest changed documents: a share δ lost, none gained).
        The result is at least that least-churn candidate's MDE, whose test statistic grows with its drop (see
        `least_churn_regression`); with no document changed (SE 0) it is that MDE, and no regression smaller than it
        is caught with the given power, whatever its churn.
    baseline_standard_error: for other outcomes, the standard error of the baseline's own value, used when the
        paired SE is 0 (no document changed): the paired SE of a candidate that drew half its documents anew from
        the baseline's distribution (Var(d) = ½ × 2σ²).
    """
    if standard_error < 0 or margin < 0 or baseline_standard_error < 0:
        raise ValueError(f"standard errors and margin must be >= 0, got {standard_error}, {margin}, "
                         f"{baseline_standard_error}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    z_alpha, z_power = upper_quantile(alpha), NormalDist().inv_cdf(power)
    if binary_documents is None:
        return margin + (z_alpha + z_power) * (standard_error or baseline_standard_error)
    # The least-churn candidate's delta varies with its own size: the drop at which the test's edge (the least drop
    # that can test as worse) lies z_power of its standard errors below it.
    edge = least_churn_regression(margin, z_alpha, binary_documents)
    least_churn = least_churn_regression(edge, z_power, binary_documents)
    return max(margin + (z_alpha + z_power) * standard_error, least_churn)


def least_churn_regression(margin: float, z: float, documents: int) -> float:
    """The drop δ of a mean of 0/1 values over `documents` that lies z standard errors beyond −margin at the least
    variance a drop of δ can have: paired differences in {−1, 0, 1} with mean −δ have a variance of at least δ − δ²,
    so δ − margin = z × √((δ − δ²) / n) (the root of (δ − margin)² = k δ (1 − δ), k = z² / n, on the side of z)."""
    if documents < 1:
        raise ValueError(f"documents must be >= 1, got {documents}")
    k = z * z / documents
    b = 2 * margin + k
    root = math.copysign(math.sqrt(max(0.0, b * b - 4 * (1 + k) * margin * margin)), z)
    return (b + root) / (2 * (1 + k))


def upper_quantile(level: float) -> float:
    """z_{1-level}, the standard normal's upper `level` quantile, computed as −z_level: 1 − level rounds to 1 for
    the tiny levels a session's alpha split can give (alpha 1e-9 shared by thousands of tasks)."""
    return -NormalDist().inv_cdf(level)
