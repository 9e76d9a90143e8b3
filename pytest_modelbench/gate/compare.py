"""Baseline vs candidate: per metric × category entries with a verdict, from paired tests on the same documents.

Pairing. Documents are matched by their hash (context, continuations and gold; repeats numbered), never by
position, so a reordered dataset still pairs correctly. Both runs must hold exactly the same documents: a
document missing on either side means the prompts or answers changed, and that is reported as
"re-baseline required" (see `baseline.comparability_problems`) rather than compared on a subset.

Orientation. Every delta is oriented so that positive is better and negative is worse:
  higher is better  → delta = candidate − baseline
  lower is better   → delta = baseline − candidate
  ideal point x*    → delta = |baseline − x*| − |candidate − x*|   (distance from the ideal shrinking is better)

Tests. Each entry gets the oriented delta and its standard error:
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
Clusters. Where the task's YAML declares `modelbench.gate.cluster` (or a group's tasks do), documents of one cluster
are related evidence (one StereoSet target's sentences): a 0/1 entry's standard error is cluster-robust and McNemar's
floor counts clusters (statistics.clustered_paired_standard_error, cluster_signs), a bootstrap resamples whole
clusters, and p-values are Student's t with G − 1 degrees of freedom (a category of 3 StereoSet targets has little
evidence). The candidate's clusters decide: a baseline file stores none, and documents pair by key.
Derived evidence. A task whose metrics are the inputs of a derived metric (metrics/evidence.py: CrowS-Pairs'
signed stereotype_preference from pct_stereotype and likelihood_diff) gets its entries too, overall and per
category, tested like any continuous metric and in the same family; its margin is taken at the derived metric's
own scale of the baseline's values (the mean absolute gap) instead of at their mean.
Categories. A category holds the documents of that category; a group's subgroup (`category_members`) holds those of
its tasks. A group metric that some tasks do not score is tested on the documents of those that do.
Error control. The task's entries (every metric, overall and per category) are one family, tested with weighted
Holm at alpha / tasks (`Tolerance.task_alpha`): the overall entries share half the weight, the categories the other
half (the overall entries all of it when there are no categories), and within each share a derived metric's entry
weighs DERIVED_WEIGHT against 1 for every other metric's; a rejected entry passes its weight on. The p-values of
"not better than +margin" are adjusted the same way, with the same weights, so "improved" is claimed as rarely.
MDE. `statistics.detectable_regression` at the entry's own share of the level, with the least-churn floor for 0/1
outcomes and the baseline's own standard error for others when no document changed.
Verdict. `statistics.judge`; the effective margin is the metric's `Margin` at the baseline value.
"""

from __future__ import annotations

import functools
import math
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence
import numpy as np

from pytest_modelbench.errors import UndefinedAggregateError
from pytest_modelbench.gate.baseline import BaselineRecord, Tolerance
from pytest_modelbench.gate.pooled import PoolingStats, poolable
from pytest_modelbench.metrics.evidence import DERIVED_METRICS, derived_metrics
from pytest_modelbench.metrics.registry import Direction
from pytest_modelbench.gate.statistics import (
    Verdict,
    bootstrap_standard_error,
    cluster_labels,
    cluster_signs,
    clustered_paired_standard_error,
    detectable_regression,
    holm_adjust,
    judge,
    mcnemar_one_sided_pvalue,
    paired_binary_standard_error,
    paired_bootstrap,
    worse_than_margin_pvalue,
)

# Read when `compare` runs (benchmarks/gate_error_rates.py lowers them to simulate thousands of candidates).
N_RESAMPLES = 2000
AGGREGATE_RESAMPLES = 200  # each resample calls the aggregate (Python, linear in documents) on both sides
# An aggregate undefined on more of the resamples than this rests on the documents of about three clusters or fewer
# (with k of G clusters holding the documents it needs, a resample has none of them with probability (1 − k/G)^G,
# about e^−k): its bootstrap describes those few clusters, so the entry gets no test, as a category of one cluster.
MAX_UNDEFINED_SHARE = 0.05
OVERALL_SHARE = 0.5  # of a task's Holm weight, for its overall entries when it has categories
DERIVED_WEIGHT = 2.0  # of a derived metric's entry within its share, against 1 for each other metric's (holm_weights)
POWER = 0.8  # of the reported smallest detectable regression (Entry.mde)

# Worst first: the order of rows in every table.
VERDICT_RANK = {Verdict.REGRESSED: 0, Verdict.INCONCLUSIVE: 1, Verdict.PASS: 2, Verdict.IMPROVED: 3}


@dataclass(frozen=True)
class Entry:
    """One gated number: a metric over all documents (category None) or over one category."""

    metric: str
    category: str | None
    n: int
    baseline: float  # metric value, as reported (not oriented)
    candidate: float
    delta: float  # oriented: positive is better
    margin: float
    p_value: float  # of "not worse than −margin", Holm-adjusted over the task (improved: of "not better than +margin",
    # Holm-adjusted likewise)
    raw_p_value: float  # of "not worse than −margin", unadjusted
    mde: float  # smallest regression caught with 80% power (positive, units of delta)
    standard_error: float  # of delta (0 when there is no test)
    verdict: Verdict
    test: str  # "mcnemar" | "bootstrap" | "none"
    direction: str  # "higher" | "lower" | "ideal 0.5"

    @property
    def label(self) -> str:
        return "(all)" if self.category is None else self.category


@dataclass(frozen=True)
class TaskComparison:
    task: str
    entries: tuple[Entry, ...]
    n_documents: int
    tolerance: Tolerance
    pooling: tuple[PoolingStats, ...] = ()  # the overall entries a suite's pooled entries pool (gate/pooled.py)

    def worst_first(self) -> list[Entry]:
        return sorted(self.entries, key=lambda e: (VERDICT_RANK[e.verdict], e.delta + e.margin, e.metric, e.label))

    def with_verdict(self, verdict: Verdict) -> list[Entry]:
        return [e for e in self.worst_first() if e.verdict is verdict]

    @property
    def regressed(self) -> list[Entry]:
        return self.with_verdict(Verdict.REGRESSED)

    @property
    def improved(self) -> list[Entry]:
        return self.with_verdict(Verdict.IMPROVED)

    @property
    def inconclusive(self) -> list[Entry]:
        return self.with_verdict(Verdict.INCONCLUSIVE)

    @property
    def verdict(self) -> Verdict:
        """Task-level verdict: regressed if any entry is; else improved if any is; else inconclusive if any; else pass."""
        verdicts = {e.verdict for e in self.entries}
        for verdict in (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.INCONCLUSIVE):
            if verdict in verdicts:
                return verdict
        return Verdict.PASS

    def out_of_band(self, *, include_improvements: bool) -> bool:
        """Whether the stored baseline no longer describes the candidate (what --snapshot-update rewrites)."""
        return bool(self.regressed or (include_improvements and self.improved))


@dataclass(frozen=True)
class _Test:
    delta: float
    standard_error: float
    test: str  # "mcnemar" | "bootstrap" | "none"
    lost: int = 0  # McNemar only: discordant documents, oriented (good → bad, bad → good)
    gained: int = 0
    binary: bool = False  # 0/1 per-document values (the MDE's least-churn floor, statistics.detectable_regression)
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


_NO_TEST = _Test(0.0, 0.0, "none")


@dataclass(frozen=True)
class _Tested:
    """One entry before the task's error control: its test, and the value its margin is taken at."""

    metric: str
    direction: Direction
    category: str | None
    n: int
    baseline: float
    candidate: float
    test: _Test
    margin_at: float  # the baseline value; a derived metric's own scale (metrics/evidence.py)


def _registered_aggregate(name: str) -> Callable[..., float | None] | None:
    from pytest_modelbench.metrics.generative import corpus_aggregate
    from pytest_modelbench.metrics.registry import METRICS

    metric = METRICS.get(name)
    return getattr(metric, "aggregate", None) if metric is not None else corpus_aggregate(name)


def _seed(task: str, metric: str, category: str | None) -> int:
    return zlib.crc32(f"{task}\x00{metric}\x00{category}".encode("utf-8"))


def paired_test(
    baseline: np.ndarray, candidate: np.ndarray, *, direction: str, ideal: float | None, binary: bool, seed: int = 0,
    n_resamples: int = N_RESAMPLES, clusters: np.ndarray | None = None,
) -> _Test:
    """Oriented delta (positive = better) and its standard error (and discordant counts for 0/1 outcomes).

    A bootstrap over fewer than two documents has no standard error: its test is "none" (delta kept, never blocks).
    `clusters`: the documents' cluster labels (statistics.cluster_labels) where the task declares clusters; then the
    standard error is cluster-robust (the cluster bootstrap for a bootstrapped metric, scaled by √(G/(G−1)) as CR1),
    the discordant counts are the clusters' (a sign test over clusters), and the p-values Student's t with G − 1
    degrees of freedom.
    """
    base = np.asarray(baseline, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    if base.size == 0:
        return _NO_TEST
    bootstrapped = direction == "ideal" or not binary
    if bootstrapped and base.size < 2:
        return _Test(_oriented(float(cand[0]), direction, ideal) - _oriented(float(base[0]), direction, ideal), 0.0, "none")
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
            return _Test(delta, clustered_paired_standard_error(d, clusters), "mcnemar", *cluster_signs(d, clusters),
                         df=_cluster_count(clusters) - 1, binary=True)
        return _Test(delta, paired_binary_standard_error(base, cand), "mcnemar", lost, gained, binary=True)
    result = paired_bootstrap(sign * base, sign * cand, n_resamples=n_resamples, seed=seed, clusters=clusters)
    return _bootstrapped(result.delta, result.standard_error, clusters,
                         baseline_standard_error=result.baseline_standard_error)


def _cluster_count(labels: np.ndarray) -> int:
    return int(np.unique(labels).size)


def _bootstrapped(delta: float, standard_error: float, clusters: np.ndarray | None, *, binary: bool = False,
                  baseline_standard_error: float = 0.0) -> _Test:
    """A bootstrap test; over clusters its standard errors scaled by √(G/(G−1)) (CR1's factor: resampling G clusters
    underestimates the variance by (G−1)/G, which matters for a category of a few), with G − 1 degrees of freedom.
    A single cluster has no standard error: no test."""
    if clusters is None:
        return _Test(delta, standard_error, "bootstrap", binary=binary, baseline_standard_error=baseline_standard_error)
    groups = _cluster_count(clusters)
    if groups < 2:
        return _Test(delta, 0.0, "none")
    scale = math.sqrt(groups / (groups - 1))
    return _Test(delta, standard_error * scale, "bootstrap", df=groups - 1, binary=binary,
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
) -> tuple[float | None, float | None, _Test]:
    """Paired bootstrap of a metric's own aggregate: (baseline value, candidate value, oriented test).

    Same SE convention as `statistics.paired_bootstrap`; resamples where the aggregate is undefined (None, or a
    task's aggregation returning NaN: a resample without a document of the kind it needs) are dropped, and above
    MAX_UNDEFINED_SHARE of them the entry has no test. An aggregate with a `resampler` (metrics/bias.py's OverTerms)
    is evaluated at each resample's indices without rebuilding its document list. `clusters`: the documents' cluster
    labels; then each resample draws whole clusters (the cluster bootstrap).
    """
    n = len(documents)
    if n == 0:
        return None, None, _NO_TEST
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
        return base_value, cand_value, _NO_TEST
    delta = _oriented(cand_value, direction, ideal) - _oriented(base_value, direction, ideal)
    rng = np.random.Generator(np.random.PCG64(seed))
    members = None if clusters is None else _cluster_members(clusters)
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
        return base_value, cand_value, _Test(float(delta), 0.0, "none")
    return base_value, cand_value, _bootstrapped(float(delta), bootstrap_standard_error(np.asarray(deltas)), clusters,
                                                 baseline_standard_error=bootstrap_standard_error(np.asarray(baselines)))


def _cluster_members(labels: np.ndarray) -> list[np.ndarray]:
    """The document positions of each cluster, by label."""
    _, inverse = np.unique(labels, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.cumsum(np.bincount(inverse))[:-1])


def compare(
    baseline: BaselineRecord, candidate: BaselineRecord, tolerance: Tolerance, documents: Sequence[Any] | None = None,
    aggregates: Mapping[str, Callable[..., float | None]] | None = None,
) -> TaskComparison:
    """Gate the candidate against the baseline. Both must be comparable (`comparability_problems` empty).

    `documents`: the candidate's DocumentRequests, in the candidate record's order; required when a metric has its
    own aggregate (ValueError without them: an entry is never left out).
    `aggregates`: the scored metrics' own aggregates by metric name, for those the registry does not know by name
    (a process_results metric's median or !function aggregation).
    """
    position = {key: i for i, key in enumerate(baseline.doc_keys)}
    missing = [key for key in candidate.doc_keys if key not in position]
    if missing or len(position) != len(candidate.doc_keys):
        raise ValueError("baseline and candidate hold different documents; check comparability first")
    order = np.array([position[key] for key in candidate.doc_keys], dtype=int)
    groups = entry_groups(candidate)
    clusters = cluster_labels(candidate.doc_clusters) if any(c is not None for c in candidate.doc_clusters) else None

    base_values = {name: _as_column(v)[order] for name, v in baseline.values.items()}
    cand_values = {name: _as_column(v) for name, v in candidate.values.items()}
    tested: list[_Tested] = []
    pooling_values: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # poolable metrics' overall documents
    for metric in candidate.metrics:
        seed = functools.partial(_seed, candidate.task, metric.name)
        # A group metric has no value on the documents of its tasks that do not score it (NaN on both sides).
        column = cand_values.get(metric.name)
        scored = ~np.isnan(column) if column is not None and column.ndim == 1 and column.dtype != object \
            else np.ones(len(order), dtype=bool)
        if metric.aggregate:
            aggregate = (aggregates or {}).get(metric.name) or _registered_aggregate(metric.name)
            if aggregate is None or documents is None:  # never drop an entry: the caller must pass the documents
                raise ValueError(f"metric '{metric.name}' is an aggregate: compare() needs the candidate's documents")
            for category, mask in groups:
                idx = np.flatnonzero(mask & scored)
                if not idx.size:
                    continue
                base_value, cand_value, test = aggregate_test(
                    aggregate, {k: v[idx] for k, v in base_values.items()}, {k: v[idx] for k, v in cand_values.items()},
                    [documents[i] for i in idx], direction=metric.direction, ideal=metric.ideal, seed=seed(category),
                    n_resamples=AGGREGATE_RESAMPLES, clusters=None if clusters is None else clusters[idx],
                )
                if base_value is None or cand_value is None:
                    raise ValueError(f"metric '{metric.name}': the aggregate is undefined on {len(idx)} documents")
                tested.append(_Tested(metric.name, metric.as_direction(), category, len(idx), base_value, cand_value,
                                      test, base_value))
        else:
            for category, mask in groups:
                base, cand = base_values[metric.name][mask & scored], cand_values[metric.name][mask & scored]
                if base.size == 0:
                    continue
                test = paired_test(
                    base, cand, direction=metric.direction, ideal=metric.ideal, binary=metric.binary,
                    seed=seed(category), n_resamples=N_RESAMPLES,
                    clusters=None if clusters is None else clusters[mask & scored],
                )
                tested.append(_Tested(metric.name, metric.as_direction(), category, int(base.size),
                                      float(np.mean(base)), float(np.mean(cand)), test, float(np.mean(base))))
                if category is None and poolable(metric.binary, metric.direction):
                    pooling_values[metric.name] = (base, cand, scored)
    for derived in derived_metrics(candidate.metric_names):
        base_column, cand_column = derived.values(base_values), derived.values(cand_values)
        for category, mask in groups:
            base, cand = base_column[mask], cand_column[mask]
            if base.size == 0:
                continue
            test = paired_test(
                base, cand, direction=derived.direction.kind, ideal=derived.direction.ideal, binary=False,
                seed=_seed(candidate.task, derived.name, category), n_resamples=N_RESAMPLES,
                clusters=None if clusters is None else clusters[mask],
            )
            tested.append(_Tested(derived.name, derived.direction, category, int(base.size), float(np.mean(base)),
                                  float(np.mean(cand)), test, derived.margin_scale(base)))

    margins = [tolerance.margin(t.metric).at(t.margin_at) for t in tested]
    p_values = [t.test.p_values(margin) for t, margin in zip(tested, margins)]
    weights = holm_weights([(t.metric, t.category) for t in tested])
    alpha = tolerance.task_alpha
    adjusted = holm_adjust([worse for worse, _ in p_values], weights) if tested else []
    adjusted_better = holm_adjust([better for _, better in p_values], weights) if tested else []
    entries: list[Entry] = []
    for t, margin, (worse, _), p_value, better, weight in zip(tested, margins, p_values, adjusted, adjusted_better,
                                                               weights):
        # The entry's own level before any weight is passed on to it: what it is sure to be tested at.
        mde = detectable_regression(t.test.standard_error, margin, alpha * weight / sum(weights), POWER,
                                    binary_documents=t.n if t.test.binary else None,
                                    baseline_standard_error=t.test.baseline_standard_error)
        judgement = judge(
            t.test.delta, p_worse=p_value, p_better=better, standard_error=t.test.standard_error, margin=margin,
            alpha=alpha, mde=mde,
        )
        entries.append(
            Entry(
                metric=t.metric, category=t.category, n=t.n, baseline=t.baseline, candidate=t.candidate,
                delta=t.test.delta, margin=margin, p_value=judgement.p_value, raw_p_value=worse, mde=mde,
                standard_error=t.test.standard_error, verdict=judgement.verdict, test=t.test.test,
                direction=f"ideal {t.direction.ideal:g}" if t.direction.kind == "ideal" else t.direction.kind,
            )
        )
    pooling = tuple(
        PoolingStats.of(e.metric, *pooling_values[e.metric][:2], e.direction, e.margin,
                        *_scored_identities(candidate, pooling_values[e.metric][2]))
        for e in entries if e.category is None and e.metric in pooling_values
    )
    return TaskComparison(candidate.task, tuple(entries), len(order), tolerance, pooling)


def _scored_identities(record: BaselineRecord, scored: np.ndarray) -> tuple[list[str], list[str | None]]:
    """The keys and declared clusters of a record's documents where `scored`."""
    positions = np.flatnonzero(scored).tolist()
    clusters = [record.doc_clusters[i] for i in positions] if record.doc_clusters else []
    return [record.doc_keys[i] for i in positions], clusters


def entry_groups(record: BaselineRecord) -> list[tuple[str | None, np.ndarray]]:
    """The documents of each of the record's entries, in its document order: (None, all of them), then each category
    (a document category, or a group's subgroup: the documents of its member categories)."""
    categories = np.array(["" if c is None else c for c in record.doc_categories], dtype=object)
    groups: list[tuple[str | None, np.ndarray]] = [(None, np.ones(len(categories), dtype=bool))]
    if record.category_field is not None:
        groups += [(c, categories == c) for c in sorted(set(categories.tolist()))]
    groups += [(c, np.isin(categories, members)) for c, members in sorted(record.category_members.items())]
    return groups


def _as_column(values: np.ndarray) -> np.ndarray:
    """A metric's per-document values as floats; a column of lists (each document's own float array, a
    process_results list value) stays an object array, which indexes by document like the others."""
    return values if isinstance(values, np.ndarray) and values.dtype == object else np.asarray(values, dtype=float)


def holm_weights(entries: Sequence[tuple[str, str | None]]) -> list[float]:
    """Weights of a task's entries, (metric, category) with category None for an overall entry, for weighted Holm.

    The overall entries share OVERALL_SHARE, the category entries the rest; without categories the overall entries
    share everything. The overall entries are the release question ("did the task regress?") and are sure of half
    the task's level; the categories hold a share of their own, so that a regression hidden in one or two categories
    can block even when the overall entry cannot see it. Within each share a derived metric's entry (metrics/
    evidence.py: CrowS-Pairs' stereotype_preference) weighs DERIVED_WEIGHT and every other entry 1: it is the
    paired continuous evidence of its inputs' question (pct_stereotype keeps only the sign of the same per-pair
    gap), and on simulated and real fine-tunes it is the entry that names a biased category (docs/baseline-gate.md,
    "Error rates").
    """
    raw = [DERIVED_WEIGHT if metric in DERIVED_METRICS else 1.0 for metric, _ in entries]
    overall = sum(w for w, (_, c) in zip(raw, entries) if c is None)
    by_category = sum(raw) - overall
    overall_share = OVERALL_SHARE if by_category and overall else 1.0 if overall else 0.0
    return [
        w * (overall_share / overall if c is None else (1.0 - overall_share) / by_category)
        for w, (_, c) in zip(raw, entries)
    ]
