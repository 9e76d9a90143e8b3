"""The paired standard error of a mean difference, and the paired bootstrap.

Both models are scored on the same documents, so every comparison is paired: per document, candidate outcome minus
baseline outcome. The standard error of the mean difference is computed here and nowhere else, in its three forms:
from the differences (`paired_standard_error`), cluster-robust where documents are declared related (the same
function, given the documents' cluster labels), and from the share of 0/1 differences that are not 0
(`paired_standard_error_of_shares`, for a full run's verdict known only by bounds on its delta and churn).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Upper bound on index-matrix elements drawn per bootstrap chunk (8 MiB of int64).
_CHUNK_ELEMENTS = 1 << 20


def paired_standard_error(differences: np.ndarray, clusters: np.ndarray | None = None) -> float:
    """Standard error of the mean of the paired differences d (one per document).

    Without `clusters`: std(d, ddof=1) / √n; 0 for n < 2.
    With `clusters` (the documents' cluster labels, clusters.cluster_labels): cluster-robust (CR1, Liang & Zeger's
    sandwich with the G/(G−1) small-sample factor): with S_g the sum of the differences of cluster g, n_g its size,
    N = Σ n_g and d̄ the mean,
        SE² = G/(G−1) × Σ_g (S_g − n_g d̄)² / N².
    One document a cluster gives std(d, ddof=1)/√N, the unclustered standard error; 0 below two clusters."""
    d = np.asarray(differences, dtype=float)
    if clusters is None:
        if d.ndim != 1:
            raise ValueError(f"need 1-D arrays, got shape {d.shape}")
        if d.size < 2:
            return 0.0
        return float(np.std(d, ddof=1) / math.sqrt(d.size))
    labels = np.asarray(clusters, dtype=int)
    if d.ndim != 1 or labels.shape != d.shape:
        raise ValueError(f"need 1-D differences and one label each, got {d.shape} and {labels.shape}")
    _, labels = np.unique(labels, return_inverse=True)
    groups = int(labels.max()) + 1 if labels.size else 0
    if groups < 2:
        return 0.0
    mean = float(d.mean())
    residuals = np.bincount(labels, weights=d - mean, minlength=groups)
    return math.sqrt(groups / (groups - 1) * float(np.dot(residuals, residuals))) / d.size


def paired_standard_error_of_shares(delta: float, changed: float, n: int) -> float:
    """`paired_standard_error` of n differences in {−1, 0, 1} known only by their mean `delta` and the share `changed`
    of them that are not 0 (their mean square): √((changed − delta²) / (n − 1)), the same std(d, ddof=1)/√n."""
    return math.sqrt(max(changed - delta * delta, 0.0) / max(n - 1, 1))


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
