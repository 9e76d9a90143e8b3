"""Baseline vs candidate: per metric × category entries with a verdict, from paired tests on the same documents.

Pairing. Documents are matched by their hash (context, continuations and gold; repeats numbered), never by
position, so a reordered dataset still pairs correctly. Both runs must hold exactly the same documents: a
document missing on either side means the prompts or answers changed, and that is reported as
"re-baseline required" (see `baseline.comparability_problems`) rather than compared on a subset.

Evidence. Each entry's oriented delta (positive is better), its standard error and its test (McNemar for a 0/1
metric, a paired bootstrap otherwise, a bootstrap of the metric's own aggregate where it has one) are
evidence/paired_tests.py's; its p-values are those of "not worse than −margin" and "not better than +margin".
Clusters. Where the task's YAML declares `modelbench.gate.cluster` (or a group's tasks do), documents of one cluster
are related evidence (one StereoSet target's sentences): a 0/1 entry's standard error is cluster-robust and McNemar's
floor counts clusters (evidence/paired.py, evidence/clusters.py), a bootstrap resamples whole clusters, and p-values
are Student's t with G − 1 degrees of freedom (a category of 3 StereoSet targets has little evidence). The candidate's clusters decide: a baseline file stores none, and documents pair by key.
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
MDE. `significance.detectable_regression` at the entry's own share of the level, with the least-churn floor for 0/1
outcomes and the baseline's own standard error for others when no document changed.
Verdict. `verdict.judge_entry`; the effective margin is the metric's `Margin` at the baseline value.
Anchors. An entry is compared with the per-document values of the recording its reference came from
(`BaselineRecord.reference_values`; gate/ratchet.py), which is the baseline's own unless it kept an earlier anchor.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pytest_modelbench.gate.baseline import BaselineRecord, Tolerance
from pytest_modelbench.gate.evidence.clusters import cluster_labels
from pytest_modelbench.gate.evidence.paired_tests import (
    AGGREGATE_RESAMPLES,
    N_RESAMPLES,
    PairedTest,
    aggregate_test,
    paired_test,
)
from pytest_modelbench.gate.evidence.pooling import PoolingStats
from pytest_modelbench.gate.evidence.significance import detectable_regression, holm_adjust
from pytest_modelbench.gate.pooled import poolable
from pytest_modelbench.gate.verdict import Verdict, judge_entry
from pytest_modelbench.metrics.evidence import DERIVED_METRICS, derived_metrics
from pytest_modelbench.metrics.generative import corpus_aggregate
from pytest_modelbench.metrics.registry import METRICS, Direction

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
    pooling: tuple[PoolingStats, ...] = ()  # the overall entries a suite's pooled entries pool (evidence/pooling.py)

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
class _Tested:
    """One entry before the task's error control: its test, and the value its margin is taken at."""

    metric: str
    direction: Direction
    category: str | None
    n: int
    baseline: float
    candidate: float
    test: PairedTest
    margin_at: float  # the baseline value; a derived metric's own scale (metrics/evidence.py)


def _registered_aggregate(name: str) -> Callable[..., float | None] | None:
    metric = METRICS.get(name)
    return getattr(metric, "aggregate", None) if metric is not None else corpus_aggregate(name)


def _seed(task: str, metric: str, category: str | None) -> int:
    return zlib.crc32(f"{task}\x00{metric}\x00{category}".encode("utf-8"))


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
    ordered: dict[int, dict[str, np.ndarray]] = {id(baseline.values): base_values}

    def reference(metric: str, category: str | None) -> dict[str, np.ndarray]:
        """The entry's baseline values, in the candidate's order: its anchor recording's (gate/ratchet.py)."""
        values = baseline.reference_values(metric, category)
        if id(values) not in ordered:
            ordered[id(values)] = {name: _as_column(v)[order] for name, v in values.items()}
        return ordered[id(values)]

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
                    aggregate, {k: v[idx] for k, v in reference(metric.name, category).items()}, {k: v[idx] for k, v in cand_values.items()},
                    [documents[i] for i in idx], direction=metric.direction, ideal=metric.ideal, seed=seed(category),
                    n_resamples=AGGREGATE_RESAMPLES, clusters=None if clusters is None else clusters[idx],
                )
                if base_value is None or cand_value is None:
                    raise ValueError(f"metric '{metric.name}': the aggregate is undefined on {len(idx)} documents")
                tested.append(_Tested(metric.name, metric.as_direction(), category, len(idx), base_value, cand_value,
                                      test, base_value))
        else:
            for category, mask in groups:
                base = reference(metric.name, category)[metric.name][mask & scored]
                cand = cand_values[metric.name][mask & scored]
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
        cand_column = derived.values(cand_values)
        for category, mask in groups:
            base, cand = derived.values(reference(derived.name, category))[mask], cand_column[mask]
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
        judgement = judge_entry(
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
    gap), and on simulated and real fine-tunes it is the entry that names a biased category (docs/error-rates.md,
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
