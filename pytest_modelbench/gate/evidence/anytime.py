"""Always-valid evidence: p-values and confidence bounds that hold at every look at once, so that a task scored in
blocks (early_stop.py) may look after each block at no cost in error control.

Betting. "Regressed" (an entry of 0/1 values): the bet against "not worse than −margin" stakes λ_i on each document,
winning λ_i (−margin − d_i); λ_i ∈ [0, BET_CAP / (1 + margin)] is chosen from the documents before it (Kelly's
fraction: their mean winnings over their mean squared winnings, with one imagined document at 0). Where the task's
documents are drawn from a population no worse than −margin (the full run's own model) and scored in random order,
the capital is a nonnegative supermartingale, so p = 1 / its largest value is valid at any look (Ville's
inequality; Waudby-Smith and Ramdas, "Estimating means of bounded random variables by betting", JRSS-B 2024).
"Not regressed": for a candidate mean m of the whole population of N values in [low, high], the documents not yet
drawn before the i-th have mean μ_i(m) = (N m − the sum drawn) / (N − i + 1); the capital Π (1 + λ_i (x_i − μ_i(m)))
is a nonnegative martingale when m is the population's mean (Waudby-Smith and Ramdas, "Confidence sequences for
sampling without replacement", 2020), so the m whose capital ever reaches 1/α are excluded, at level α over all
documents at once. λ_i = min(sqrt(2 log(1/α) / (N σ̂²)), BET_CAP / (μ_i(m) − low)), σ̂² the spread of the values
before it with one imagined at (high − low)² / 4; the capital falls as m rises, so the bound is found by bisection.
Neither bet trusts a variance estimate: a wrong one only bets badly.

Normal mixture (entries without a known bound per document). With S_t = −√t (delta + margin) / SE after t
documents, the one-sided normal mixture (a half-normal mixing distribution of scale ρ over the worse side)
    M_t = 2 (1 + tρ²)^(-1/2) exp(ρ²S_t² / (2(1 + tρ²))) Φ(ρS_t / √(1 + tρ²))
is asymptotically a nonnegative martingale at the margin (Robbins' mixture; the asymptotic confidence sequences of
Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas, 2021), so p = min(1, 1/M_t) is valid at any look; ρ² is tuned to
be tightest at the entry's full document count. Like the full run's normal approximation it is asymptotic: such an
entry settles regressed (early_stop.py) only from MIN_ENTRY_DOCUMENTS scored documents of its own (or all of its
category), and its standard error is steadied by a prior of PRIOR_DOCUMENTS documents at its metric's overall spread
(`steadied_standard_errors`), never lowered.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

BET_CAP = 0.8  # of the largest bet a document can lose in full: a bet never stakes everything
BOUND_PRECISION = 1e-6  # of the confidence bounds, in units of the mean paired difference


def mixture_rho2(planned: int, alpha: float) -> float:
    """The mixture's ρ², tightest at `planned` documents for level `alpha`."""
    log_alpha = math.log(alpha)
    return (-2 * log_alpha + math.log(1 - 2 * log_alpha)) / max(planned, 1)


def anytime_p_worse(delta: float, standard_error: float, margin: float, n: int, planned: int, alpha: float) -> float:
    """Always-valid one-sided p-value of "not worse than −margin" after `n` documents, for an entry without a known
    bound per document (module docstring: the normal mixture)."""
    if standard_error == 0:
        return 0.0 if delta < -margin else 1.0
    evidence = -(delta + margin) / standard_error * math.sqrt(n)  # S_t: the standardised sum of the worse side
    if evidence <= 0:
        return 1.0
    rho2 = mixture_rho2(planned, alpha)
    spread = 1 + rho2 * n
    log_m = (math.log(2) - 0.5 * math.log(spread) + rho2 * evidence * evidence / (2 * spread)
             + math.log(NormalDist().cdf(math.sqrt(rho2) * evidence / math.sqrt(spread))))
    return min(1.0, math.exp(-log_m))


def betting_p_worse(differences: np.ndarray, margin: float) -> float:
    """Always-valid p-value of "the documents' mean paired difference is not worse than −margin", for differences in
    [−1, 1] in scoring order (module docstring, "Betting"): 1 / the most the bet against it ever held."""
    worse = -margin - differences  # what a bet that the candidate is worse than −margin wins per unit, per document
    if worse.size == 0:
        return 1.0
    seen = np.arange(worse.size, dtype=float) + 1  # the documents before each, and one imagined at 0 with spread 1
    gain = np.concatenate([[0.0], np.cumsum(worse)[:-1]]) / seen
    spread = (1 + np.concatenate([[0.0], np.cumsum(worse * worse)[:-1]])) / seen
    bets = np.clip(gain / spread, 0.0, BET_CAP / (1 + margin))
    most = float(np.max(np.cumsum(np.log1p(bets * worse))))
    return min(1.0, math.exp(-most)) if most > 0 else 1.0


def population_mean_bound(values: np.ndarray, total: int, level: float, low: float, high: float,
                          upper: bool = False) -> float:
    """A lower (or `upper`) bound, valid at every document at once with probability 1 − `level`, for the mean of all
    `total` values of a population in [`low`, `high`] of which `values` are the first drawn without replacement
    (module docstring, "Betting"). Without a document it is the range's end."""
    if upper:
        return -population_mean_bound(-values, total, level, -high, -low)
    drawn = values.size
    if drawn == 0:
        return low
    before = np.concatenate([[0.0], np.cumsum(values)[:-1]])
    counts = np.arange(drawn, dtype=float)
    mean_before = before / np.maximum(counts, 1)
    squares_before = np.concatenate([[0.0], np.cumsum(values * values)[:-1]])
    spread = (((high - low) / 2) ** 2 + np.maximum(squares_before - counts * mean_before ** 2, 0.0)) / (counts + 1)
    planned_bets = np.sqrt(2 * math.log(1 / level) / (max(total, 1) * spread))
    left = total - counts  # documents not yet drawn, each document's own included
    threshold = math.log(1 / level)

    def rejected(mean: float) -> bool:
        rest = (total * mean - before) / left  # the undrawn documents' mean, were the population's `mean`
        if np.any(rest < low):
            return True
        bets = np.minimum(planned_bets, BET_CAP / np.maximum(rest - low, 1e-12))
        return float(np.max(np.cumsum(np.log1p(bets * (values - rest))))) >= threshold

    below, above = (values.sum() + low * (total - drawn)) / total, (values.sum() + high * (total - drawn)) / total
    while above - below > BOUND_PRECISION:
        middle = (below + above) / 2
        below, above = (middle, above) if rejected(middle) else (below, middle)
    return below
