"""Paired statistics for gating a candidate model against a stored baseline.

Both models are scored on the same documents, so every comparison here is paired:
per document, candidate outcome minus baseline outcome.
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

# Below this many discordant documents McNemar uses the exact binomial test.
_EXACT_MCNEMAR_BELOW = 25
# Upper bound on index-matrix elements drawn per bootstrap chunk (8 MiB of int64).
_CHUNK_ELEMENTS = 1 << 20


def mcnemar_pvalue(b: int, c: int) -> float:
    """Two-sided McNemar p-value from the discordant counts.

    b: baseline right / candidate wrong; c: baseline wrong / candidate right.
    Exact binomial test of min(b, c) against Binomial(b + c, 0.5) when b + c < 25,
    otherwise chi-square with continuity correction (1 dof).
    """
    b, c = operator.index(b), operator.index(c)
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    if n < _EXACT_MCNEMAR_BELOW:
        tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
        # Integer true division is exact-then-rounded, so no overflow of 2**n as a float.
        return min(1.0, 2 * tail / 2**n)
    # Clamped at 0 so that b == c gives chi2 = 0 (p = 1) instead of 1 / n.
    chi2 = max(abs(b - c) - 1, 0) ** 2 / n
    # Survival function of chi-square with 1 dof: P(|Z| >= sqrt(chi2)).
    return math.erfc(math.sqrt(chi2 / 2))


@dataclass(frozen=True)
class BootstrapResult:
    """Paired bootstrap of statistic(candidate) - statistic(baseline)."""

    delta: float  # on the full data
    low: float  # percentile interval of the resampled deltas
    high: float
    p_value: float  # two-sided, never exactly 0
    standard_error: float  # std (ddof=1) of the resampled deltas


def paired_bootstrap(
    baseline: np.ndarray,
    candidate: np.ndarray,
    *,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Resample documents with replacement (same indices for both arrays) and recompute the delta.

    p_value = min(1, 2 * (k + 1) / (B + 1)), k = the smaller of #(deltas <= 0) and #(deltas >= 0).
    Deterministic for a given seed (PCG64).
    """
    base = np.asarray(baseline, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    if base.ndim != 1 or base.shape != cand.shape or base.size == 0:
        raise ValueError(
            f"need two non-empty 1-D arrays of equal length, got {base.shape} and {cand.shape}"
        )
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")

    n = base.size
    rng = np.random.Generator(np.random.PCG64(seed))
    diff = cand - base
    deltas = np.empty(n_resamples)
    rows = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, n_resamples, rows):
        idx = rng.integers(0, n, size=(min(rows, n_resamples - start), n))
        if statistic is np.mean:
            chunk = diff[idx].mean(axis=1)
        else:
            chunk = [statistic(cand[i]) - statistic(base[i]) for i in idx]
        deltas[start : start + len(idx)] = chunk

    tail = (1 - confidence) / 2
    low, high = np.quantile(deltas, [tail, 1 - tail])
    p_value, standard_error = bootstrap_p_value_and_se(deltas)
    return BootstrapResult(
        delta=float(statistic(cand) - statistic(base)),
        low=float(low),
        high=float(high),
        p_value=p_value,
        standard_error=standard_error,
    )


def bootstrap_p_value_and_se(deltas: np.ndarray) -> tuple[float, float]:
    """Two-sided p-value of "no change" from resampled deltas (the smaller tail, +1 smoothed), and their SE (n−1)."""
    k = min(np.count_nonzero(deltas <= 0), np.count_nonzero(deltas >= 0))
    p_value = min(1.0, 2 * (k + 1) / (len(deltas) + 1))
    return p_value, float(np.std(deltas, ddof=1)) if len(deltas) > 1 else 0.0


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order (monotone in rank, capped at 1)."""
    if any(not 0 <= p <= 1 for p in p_values):
        raise ValueError(f"p-values must lie in [0, 1], got {list(p_values)}")
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def minimum_detectable_effect(
    standard_error: float, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Smallest true effect a two-sided test at alpha detects with the given power: (z_{1-alpha/2} + z_power) * SE."""
    if standard_error < 0:
        raise ValueError(f"standard_error must be >= 0, got {standard_error}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    z = NormalDist().inv_cdf
    return (z(1 - alpha / 2) + z(power)) * standard_error


def paired_binary_standard_error(baseline: np.ndarray, candidate: np.ndarray) -> float:
    """Standard error of the mean paired difference: std(candidate - baseline, ddof=1) / sqrt(n); 0 for n < 2."""
    diff = np.asarray(candidate, dtype=float) - np.asarray(baseline, dtype=float)
    if diff.ndim != 1:
        raise ValueError(f"need 1-D arrays, got shape {diff.shape}")
    if diff.size < 2:
        return 0.0
    return float(np.std(diff, ddof=1) / math.sqrt(diff.size))


class Verdict(enum.Enum):
    PASS = "pass"
    IMPROVED = "improved"
    REGRESSED = "regressed"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    delta: float
    p_value: float
    mde: float  # minimum detectable effect, same units as delta
    margin: float


def judge(
    delta: float,
    *,
    p_value: float,
    standard_error: float,
    margin: float,
    alpha: float = 0.05,
    power: float = 0.8,
) -> Judgement:
    """Verdict for one gated entry.

    delta: candidate - baseline, oriented so that positive is better.
    p_value: two-sided p-value for delta != 0, already Holm-adjusted by the caller.
    standard_error: standard error of delta; gives mde = minimum_detectable_effect(SE, alpha, power).
    margin: non-inferiority margin, >= 0, same units as delta.

    Rules, first match wins (significant = p_value < alpha):
      1. REGRESSED     significant and delta < -margin
      2. IMPROVED      significant and delta > margin
      3. INCONCLUSIVE  delta < -margin (worse beyond the margin, but not significantly),
                       or mde > margin (a regression of the margin's size would likely go unseen)
      4. PASS          otherwise
    An unchanged model (p = 1) is never REGRESSED. Rule 3's first clause also keeps tiny samples
    whose sample SE is 0 (every document moved the same way) from passing.
    """
    if not math.isfinite(delta):
        raise ValueError(f"delta must be finite, got {delta}")
    if not 0 <= p_value <= 1:
        raise ValueError(f"p_value must lie in [0, 1], got {p_value}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    mde = minimum_detectable_effect(standard_error, alpha, power)
    significant = p_value < alpha
    if significant and delta < -margin:
        verdict = Verdict.REGRESSED
    elif significant and delta > margin:
        verdict = Verdict.IMPROVED
    elif delta < -margin or mde > margin:
        verdict = Verdict.INCONCLUSIVE
    else:
        verdict = Verdict.PASS
    return Judgement(verdict=verdict, delta=delta, p_value=p_value, mde=mde, margin=margin)
