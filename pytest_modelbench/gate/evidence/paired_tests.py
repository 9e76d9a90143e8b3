"""One entry's evidence: the oriented delta of a candidate against its baseline on the same documents, its standard
error, and the test its p-values come from (`PairedTest`).

Orientation. Every delta is oriented so that positive is better and negative is worse:
  higher is better  → delta = candidate − baseline
  lower is better   → delta = baseline − candidate
  ideal point x*    → delta = |baseline − x*| − |candidate − x*|   (distance from the ideal shrinking is better)

Tests:
  binary metric, higher/lower → SE = paired standard error of the per-document differences, and the discordant
                                counts for McNemar.
  continuous metric           → paired bootstrap of the mean difference (fixed seed per entry) for the SE.
  aggregate metric            → paired bootstrap that re-applies the metric's own aggregate (StereoSet's lms, ss
                                and icat: mean per target term, then over terms; a process_results `!function`
                                over each document's list, IFEval's inst_level_*) to the resampled documents of
                                both runs, with the candidate's documents (identical on both sides by the
                                comparability check). Fewer resamples (200 rather than 2000): each resample
                                calls the aggregate, which is Python and linear in the documents.
  ideal point (binary or not) → paired bootstrap of the distance-of-the-mean from the ideal. McNemar is not
                                used even for a 0/1 metric such as pct_stereotype: it tests whether the mean
                                changed, not whether its distance from 0.5 changed (0.45 → 0.55 is a
                                significant change and no regression at all; 0.52 → 0.48 neither). Near the
                                ideal the statistic is folded (not smooth), so its SE is conservative there; that
                                errs towards "inconclusive", never towards a false regression.
Against the margin δ (non-inferiority): p_worse = Φ((delta + δ) / SE) is the one-sided p-value of "not worse than
−δ"; for 0/1 metrics it is also never below McNemar's one-sided exact tail (a regression beyond the margin is a
regression, and the tail keeps a handful of discordant documents, where the normal approximation is poor, from
blocking). The bootstrap gives only the SE, so no number of resamples limits how small a p-value can be.
Clusters: a 0/1 entry's standard error is cluster-robust and McNemar's floor counts clusters, a bootstrap resamples
whole clusters, and p-values are Student's t with G − 1 degrees of freedom (clusters.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pytest_modelbench.errors import UndefinedAggregateError
from pytest_modelbench.gate.evidence.clusters import cluster_count, cluster_df, cluster_members, cluster_signs
from pytest_modelbench.gate.evidence.paired import (
    bootstrap_standard_error,
    paired_bootstrap,
    paired_standard_error,
)
from pytest_modelbench.gate.evidence.significance import mcnemar_one_sided_pvalue, worse_than_margin_pvalue

N_RESAMPLES = 2000
AGGREGATE_RESAMPLES = 200  # each resample calls the aggregate (Python, linear in documents) on both sides
# An aggregate undefined on more of the resamples than this rests on the documents of about three clusters or fewer
# (with k of G clusters holding the documents it needs, a resample has none of them with probability (1 − k/G)^G,
# about e^−k): its bootstrap describes those few clusters, so the entry gets no test, as a category of one cluster.
MAX_UNDEFINED_SHARE = 0.05


@dataclass(frozen=True)
class PairedTest:
    delta: float
    standard_error: float
    test: str  # "mcnemar" | "bootstrap" | "none"
    lost: int = 0  # McNemar only: discordant documents, oriented (good → bad, bad → good)
    gained: int = 0
    binary: bool = False  # 0/1 per-document values (the MDE's least-churn floor, significance.detectable_regression)
    baseline_standard_error: float = 0.0  # bootstrap only: of the baseline's own value (the MDE with no change)
    df: int | None = None  # clustered: G − 1 degrees of freedom of Student's t for the p-values (else normal)

    def p_values(self, margin: float) -> tuple[float, float]:
        """(p_worse, p_better): one-sided p-values of "not worse than −margin" and "not better than +margin"."""
        if self.test == "none":
            return 1.0, 1.0
        worse = worse_than_margin_pvalue(self.delta, self.standard_error, margin, self.df)
        better = worse_than_margin_pvalue(-self.delta, self.standard_error, margin, self.df)
        if self.test == "mcnemar":
            worse = max(worse, mcnemar_one_sided_pvalue(self.lost, self.gained))
            better = max(better, mcnemar_one_sided_pvalue(self.gained, self.lost))
        return worse, better


NO_TEST = PairedTest(0.0, 0.0, "none")


def paired_test(
    baseline: np.ndarray, candidate: np.ndarray, *, direction: str, ideal: float | None, binary: bool, seed: int = 0,
    n_resamples: int = N_RESAMPLES, clusters: np.ndarray | None = None,
) -> PairedTest:
    """Oriented delta (positive = better) and its standard error (and discordant counts for 0/1 outcomes).

    A bootstrap over fewer than two documents has no standard error: its test is "none" (delta kept, never blocks).
    `clusters`: the documents' cluster labels (clusters.cluster_labels) where the task declares clusters; then the
    standard error is cluster-robust (the cluster bootstrap for a bootstrapped metric, scaled by √(G/(G−1)) as CR1),
    the discordant counts are the clusters' (a sign test over clusters), and the p-values Student's t with G − 1
    degrees of freedom.
    """
    base = np.asarray(baseline, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    if base.size == 0:
        return NO_TEST
    bootstrapped = direction == "ideal" or not binary
    if bootstrapped and base.size < 2:
        return PairedTest(_oriented(float(cand[0]), direction, ideal) - _oriented(float(base[0]), direction, ideal), 0.0,
                          "none")
    if direction == "ideal":
        result = paired_bootstrap(
            base, cand, of_mean=lambda means: -np.abs(means - float(ideal)), n_resamples=n_resamples, seed=seed,
            clusters=clusters,
        )
        return _bootstrapped(result.delta, result.standard_error, clusters, binary=binary,
                             baseline_standard_error=result.baseline_standard_error)
    sign = 1.0 if direction == "higher" else -1.0
    if binary:
        good_base, good_cand = (base == 1, cand == 1) if sign > 0 else (base == 0, cand == 0)
        lost = int(np.count_nonzero(good_base & ~good_cand))
        gained = int(np.count_nonzero(~good_base & good_cand))
        delta = sign * float(np.mean(cand) - np.mean(base))
        if clusters is not None:
            d = sign * (cand - base)
            return PairedTest(delta, paired_standard_error(d, clusters), "mcnemar", *cluster_signs(d, clusters),
                              df=cluster_df(clusters), binary=True)
        return PairedTest(delta, paired_standard_error(cand - base), "mcnemar", lost, gained, binary=True)
    result = paired_bootstrap(sign * base, sign * cand, n_resamples=n_resamples, seed=seed, clusters=clusters)
    return _bootstrapped(result.delta, result.standard_error, clusters,
                         baseline_standard_error=result.baseline_standard_error)


def _bootstrapped(delta: float, standard_error: float, clusters: np.ndarray | None, *, binary: bool = False,
                  baseline_standard_error: float = 0.0) -> PairedTest:
    """A bootstrap test; over clusters its standard errors scaled by √(G/(G−1)) (CR1's factor: resampling G clusters
    underestimates the variance by (G−1)/G, which matters for a category of a few), with G − 1 degrees of freedom.
    A single cluster has no standard error: no test."""
    if clusters is None:
        return PairedTest(delta, standard_error, "bootstrap", binary=binary,
                          baseline_standard_error=baseline_standard_error)
    groups = cluster_count(clusters)
    if groups < 2:
        return PairedTest(delta, 0.0, "none")
    scale = math.sqrt(groups / (groups - 1))
    return PairedTest(delta, standard_error * scale, "bootstrap", df=cluster_df(clusters), binary=binary,
                      baseline_standard_error=baseline_standard_error * scale)


def _oriented(value: float, direction: str, ideal: float | None) -> float:
    if direction == "higher":
        return value
    if direction == "lower":
        return -value
    return -abs(value - float(ideal))


def aggregate_test(
    aggregate: Callable[[Mapping[str, np.ndarray], Sequence[Any]], float | None],
    baseline: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    documents: Sequence[Any],
    *,
    direction: str,
    ideal: float | None,
    seed: int = 0,
    n_resamples: int = AGGREGATE_RESAMPLES,
    clusters: np.ndarray | None = None,
) -> tuple[float | None, float | None, PairedTest]:
    """Paired bootstrap of a metric's own aggregate: (baseline value, candidate value, oriented test).

    Same SE convention as `paired.paired_bootstrap`; resamples where the aggregate is undefined (None, or a task's
    aggregation returning NaN: a resample without a document of the kind it needs) are dropped, and above
    MAX_UNDEFINED_SHARE of them the entry has no test. An aggregate with a `resampler` (metrics/bias.py's OverTerms)
    is evaluated at each resample's indices without rebuilding its document list. `clusters`: the documents' cluster
    labels; then each resample draws whole clusters (the cluster bootstrap).
    """
    n = len(documents)
    if n == 0:
        return None, None, NO_TEST
    resampler = getattr(aggregate, "resampler", None)
    if resampler is not None:
        baseline_at, candidate_at = resampler(baseline, documents), resampler(candidate, documents)

        def values_at(idx: np.ndarray) -> tuple[float | None, float | None]:
            return baseline_at(idx), candidate_at(idx)
    else:
        def values_at(idx: np.ndarray) -> tuple[float | None, float | None]:
            docs = [documents[i] for i in idx.tolist()]
            return (aggregate({k: v[idx] for k, v in baseline.items()}, docs),
                    aggregate({k: v[idx] for k, v in candidate.items()}, docs))

    base_value, cand_value = values_at(np.arange(n))
    if base_value is None or cand_value is None:
        return base_value, cand_value, NO_TEST
    delta = _oriented(cand_value, direction, ideal) - _oriented(base_value, direction, ideal)
    rng = np.random.Generator(np.random.PCG64(seed))
    members = None if clusters is None else cluster_members(clusters)
    deltas, baselines = [], []
    for _ in range(n_resamples):
        if members is None:
            idx = rng.integers(0, n, size=n)
        else:
            idx = np.concatenate([members[g] for g in rng.integers(0, len(members), size=len(members))])
        try:
            b, c = values_at(idx)
        except UndefinedAggregateError:
            continue
        if b is not None and c is not None:
            deltas.append(_oriented(c, direction, ideal) - _oriented(b, direction, ideal))
            baselines.append(_oriented(b, direction, ideal))
    if n < 2 or len(deltas) < (1 - MAX_UNDEFINED_SHARE) * n_resamples:
        return base_value, cand_value, PairedTest(float(delta), 0.0, "none")
    return base_value, cand_value, _bootstrapped(float(delta), bootstrap_standard_error(np.asarray(deltas)), clusters,
                                                 baseline_standard_error=bootstrap_standard_error(np.asarray(baselines)))
