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


@dataclass(frozen=True)
class BootstrapResult:
    """Paired bootstrap of of_mean(mean(candidate)) - of_mean(mean(baseline))."""

    delta: float  # on the full data
    low: float  # percentile interval of the resampled deltas
    high: float
    standard_error: float  # std (ddof=1) of the resampled deltas
    baseline_standard_error: float  # std (ddof=1) of the baseline's resampled statistic


def paired_bootstrap(
    baseline: np.ndarray,
    candidate: np.ndarray,
    *,
    of_mean: Callable[[np.ndarray], np.ndarray] | None = None,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    clusters: np.ndarray | None = None,
) -> BootstrapResult:
    """Resample documents with replacement (same indices for both arrays) and recompute the delta.

    The statistic is the mean, or `of_mean` of it (an elementwise numpy function, e.g. the distance of the mean
    from an ideal point), applied to every resample at once. Deterministic for a given seed (PCG64).
    `clusters`: the documents' cluster labels (`cluster_labels`); then whole clusters are resampled (the cluster
    bootstrap), each resample's mean over the documents of the clusters drawn.
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

    def statistic(means: np.ndarray) -> np.ndarray:
        return means if of_mean is None else of_mean(means)

    rng = np.random.Generator(np.random.PCG64(seed))
    deltas = np.empty(n_resamples)
    baselines = np.empty(n_resamples)
    if clusters is None:
        n = base.size
        rows = max(1, _CHUNK_ELEMENTS // n)
        for start in range(0, n_resamples, rows):
            idx = rng.integers(0, n, size=(min(rows, n_resamples - start), n))
            baselines[start : start + len(idx)] = statistic(base[idx].mean(axis=1))
            deltas[start : start + len(idx)] = statistic(cand[idx].mean(axis=1)) - baselines[start : start + len(idx)]
    else:
        _, labels = np.unique(np.asarray(clusters, dtype=int), return_inverse=True)
        sizes = np.bincount(labels).astype(float)
        base_sums, cand_sums = np.bincount(labels, weights=base), np.bincount(labels, weights=cand)
        groups = sizes.size
        rows = max(1, _CHUNK_ELEMENTS // groups)
        for start in range(0, n_resamples, rows):
            idx = rng.integers(0, groups, size=(min(rows, n_resamples - start), groups))
            counts = sizes[idx].sum(axis=1)
            baselines[start : start + len(idx)] = statistic(base_sums[idx].sum(axis=1) / counts)
            deltas[start : start + len(idx)] = (statistic(cand_sums[idx].sum(axis=1) / counts)
                                                - baselines[start : start + len(idx)])

    tail = (1 - confidence) / 2
    low, high = np.quantile(deltas, [tail, 1 - tail])
    return BootstrapResult(
        delta=float(statistic(cand.mean()) - statistic(base.mean())),
        low=float(low),
        high=float(high),
        standard_error=bootstrap_standard_error(deltas),
        baseline_standard_error=bootstrap_standard_error(baselines),
    )


def bootstrap_standard_error(deltas: np.ndarray) -> float:
    """Standard error of a statistic from its resampled values: their standard deviation (n−1); 0 below two."""
    return float(np.std(deltas, ddof=1)) if len(deltas) > 1 else 0.0


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


def paired_binary_standard_error(baseline: np.ndarray, candidate: np.ndarray) -> float:
    """Standard error of the mean paired difference: std(candidate - baseline, ddof=1) / sqrt(n); 0 for n < 2."""
    diff = np.asarray(candidate, dtype=float) - np.asarray(baseline, dtype=float)
    if diff.ndim != 1:
        raise ValueError(f"need 1-D arrays, got shape {diff.shape}")
    if diff.size < 2:
        return 0.0
    return float(np.std(diff, ddof=1) / math.sqrt(diff.size))


def cluster_labels(clusters: Sequence[object]) -> np.ndarray:
    """Integer labels 0..G-1 of documents' cluster ids, in order of first appearance; None is a cluster of its own."""
    labels: dict[object, int] = {}
    out = np.empty(len(clusters), dtype=int)
    for i, cluster in enumerate(clusters):
        key = ("document", i) if cluster is None else ("cluster", cluster)
        out[i] = labels.setdefault(key, len(labels))
    return out


def clustered_paired_standard_error(differences: np.ndarray, labels: np.ndarray) -> float:
    """Cluster-robust standard error of the mean paired difference (CR1, Liang & Zeger's sandwich with the G/(G−1)
    small-sample factor): with S_g the sum of the differences of cluster g, n_g its size, N = Σ n_g and d̄ the mean,
        SE² = G/(G−1) × Σ_g (S_g − n_g d̄)² / N².
    One document a cluster gives std(d, ddof=1)/√N, the unclustered standard error; 0 below two clusters."""
    d = np.asarray(differences, dtype=float)
    labels = np.asarray(labels, dtype=int)
    if d.ndim != 1 or labels.shape != d.shape:
        raise ValueError(f"need 1-D differences and one label each, got {d.shape} and {labels.shape}")
    _, labels = np.unique(labels, return_inverse=True)
    groups = int(labels.max()) + 1 if labels.size else 0
    if groups < 2:
        return 0.0
    mean = float(d.mean())
    residuals = np.bincount(labels, weights=d - mean, minlength=groups)
    return math.sqrt(groups / (groups - 1) * float(np.dot(residuals, residuals))) / d.size


def cluster_signs(differences: np.ndarray, labels: np.ndarray) -> tuple[int, int]:
    """(clusters whose differences sum below 0, clusters whose sum above 0): the discordant counts of a sign test over
    clusters, McNemar's test for clustered pairs (`mcnemar_one_sided_pvalue` of them). One document a cluster gives
    the documents' own discordant counts."""
    _, labels = np.unique(np.asarray(labels, dtype=int), return_inverse=True)
    sums = np.bincount(labels, weights=np.asarray(differences, dtype=float))
    return int(np.count_nonzero(sums < 0)), int(np.count_nonzero(sums > 0))


class Verdict(enum.Enum):
    PASS = "pass"
    IMPROVED = "improved"
    REGRESSED = "regressed"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    delta: float
    p_value: float  # the verdict's own: p_better for IMPROVED, else p_worse
    mde: float  # smallest regression caught with 80% power, same units as delta
    margin: float


def judge(
    delta: float,
    *,
    p_worse: float,
    p_better: float,
    standard_error: float,
    margin: float,
    alpha: float,
    mde: float,
) -> Judgement:
    """Verdict for one gated entry.

    delta: candidate - baseline, oriented so that positive is better.
    p_worse: p-value of "not worse than -margin", already adjusted for the other entries by the caller.
    p_better: p-value of "not better than +margin".
    standard_error: standard error of delta; margin: the non-inferiority margin, >= 0, same units as delta.
    alpha: the level the entry's family is tested at; mde: from `detectable_regression`, reported as is.

    Rules, first match wins:
      1. REGRESSED     p_worse < alpha: the data show the candidate worse than the margin
      2. IMPROVED      p_better < alpha: the data show it better than the margin
      3. PASS          the one-sided (1 - alpha) bound delta - z_{1-alpha} × SE is not below -margin: the data show
                       the entry within the margin
      4. INCONCLUSIVE  otherwise: the data cannot tell (too few documents for the margin); the entry passes
    An unchanged model (delta 0, SE 0) is a PASS; a tiny sample whose documents all moved the same way (SE 0) is
    not REGRESSED unless the caller's p_worse says so (McNemar's exact tail does for 0/1 outcomes).
    """
    if not math.isfinite(delta):
        raise ValueError(f"delta must be finite, got {delta}")
    for name, p in (("p_worse", p_worse), ("p_better", p_better)):
        if not 0 <= p <= 1:
            raise ValueError(f"{name} must lie in [0, 1], got {p}")
    if margin < 0 or standard_error < 0:
        raise ValueError(f"margin and standard_error must be >= 0, got {margin}, {standard_error}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if p_worse < alpha:
        verdict = Verdict.REGRESSED
    elif p_better < alpha:
        verdict = Verdict.IMPROVED
    elif delta - upper_quantile(alpha) * standard_error >= -margin:
        verdict = Verdict.PASS
    else:
        verdict = Verdict.INCONCLUSIVE
    p_value = p_better if verdict is Verdict.IMPROVED else p_worse
    return Judgement(verdict=verdict, delta=delta, p_value=p_value, mde=mde, margin=margin)
