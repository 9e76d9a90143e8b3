"""Baseline vs candidate: per metric × category entries with a verdict, from paired tests on the same documents.

Pairing. Documents are matched by their hash (context, continuations and gold; repeats numbered), never by
position, so a reordered dataset still pairs correctly. Both runs must hold exactly the same documents: a
document missing on either side means the prompts or answers changed, and that is reported as
"re-baseline required" (see `baseline.comparability_problems`) rather than compared on a subset.

Orientation. Every delta is oriented so that positive is better and negative is worse:
  higher is better  → delta = candidate − baseline
  lower is better   → delta = baseline − candidate
  ideal point x*    → delta = |baseline − x*| − |candidate − x*|   (distance from the ideal shrinking is better)

Tests.
  binary metric, higher/lower → McNemar on the discordant documents (exact binomial below 25 of them),
                                SE = paired standard error of the per-document differences.
  continuous metric           → paired bootstrap of the mean difference (fixed seed per entry).
  aggregate metric            → paired bootstrap that re-applies the metric's own aggregate (StereoSet's lms, ss
                                and icat: mean per target term, then over terms) to the resampled documents of
                                both runs, with the candidate's documents (identical on both sides by the
                                comparability check). Fewer resamples (200 rather than 2000): each resample
                                calls the aggregate, which is Python and linear in the documents.
  ideal point (binary or not) → paired bootstrap of the distance-of-the-mean from the ideal. McNemar is not
                                used even for a 0/1 metric such as pct_stereotype: it tests whether the mean
                                changed, not whether its distance from 0.5 changed (0.45 → 0.55 is a
                                significant change and no regression at all; 0.52 → 0.48 neither). The
                                bootstrap resamples documents, recomputes |mean − ideal| on both sides and
                                gives the p-value and SE of that difference. Near the ideal the statistic
                                is folded (not smooth), so the interval is conservative there; that errs
                                towards "inconclusive", never towards a false regression.
Holm. Within one task and metric, the p-values of the categories are Holm-adjusted as one family; the
overall entry is the task's primary test and is not adjusted.
Verdict. `statistics.judge` with the effective margin max(absolute, relative × |baseline value|).
"""

from __future__ import annotations

import functools
import math
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence
import numpy as np

from pytest_modelbench.gate.baseline import BaselineRecord, Tolerance
from pytest_modelbench.gate.statistics import (
    Verdict,
    bootstrap_p_value_and_se,
    holm_adjust,
    judge,
    mcnemar_pvalue,
    paired_binary_standard_error,
    paired_bootstrap,
)

N_RESAMPLES = 2000
AGGREGATE_RESAMPLES = 200  # each resample calls the aggregate (Python, linear in documents) on both sides


def resamples_for(base: int, n_categories: int, alpha: float) -> int:
    """Enough bootstrap resamples that the smallest p-value, 2 / (B + 1), can pass Holm's strictest threshold
    alpha / m with room to spare (3×): e.g. MMLU's 57 subjects at alpha 0.05 need 3420, not 2000."""
    return max(base, math.ceil(3 * max(n_categories, 1) / alpha))
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
    p_value: float  # Holm-adjusted for category entries
    raw_p_value: float
    mde: float
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
    p_value: float
    standard_error: float
    test: str


def _registered_aggregate(name: str) -> Callable[..., float | None] | None:
    from pytest_modelbench.metrics.registry import METRICS

    metric = METRICS.get(name)
    return getattr(metric, "aggregate", None) if metric is not None else None


def _seed(task: str, metric: str, category: str | None) -> int:
    return zlib.crc32(f"{task}\x00{metric}\x00{category}".encode("utf-8"))


def paired_test(
    baseline: np.ndarray, candidate: np.ndarray, *, direction: str, ideal: float | None, binary: bool, seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> _Test:
    """Oriented delta (positive = better), two-sided p-value and standard error of the delta."""
    base = np.asarray(baseline, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    if base.size == 0:
        return _Test(0.0, 1.0, 0.0, "none")
    if direction == "ideal":

        def closeness(values: np.ndarray) -> float:
            return _oriented(float(np.mean(values)), "ideal", ideal)

        result = paired_bootstrap(base, cand, statistic=closeness, n_resamples=n_resamples, seed=seed)
        return _Test(result.delta, result.p_value, result.standard_error, "bootstrap")
    sign = 1.0 if direction == "higher" else -1.0
    if binary:
        good_base, good_cand = (base == 1, cand == 1) if sign > 0 else (base == 0, cand == 0)
        lost = int(np.count_nonzero(good_base & ~good_cand))
        gained = int(np.count_nonzero(~good_base & good_cand))
        delta = sign * float(np.mean(cand) - np.mean(base))
        return _Test(delta, mcnemar_pvalue(lost, gained), paired_binary_standard_error(base, cand), "mcnemar")
    result = paired_bootstrap(sign * base, sign * cand, n_resamples=n_resamples, seed=seed)
    return _Test(result.delta, result.p_value, result.standard_error, "bootstrap")


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
) -> tuple[float | None, float | None, _Test]:
    """Paired bootstrap of a metric's own aggregate: (baseline value, candidate value, oriented test).

    Same p-value and SE conventions as `statistics.paired_bootstrap`; resamples where the aggregate is undefined
    (None) are dropped.
    """
    n = len(documents)
    if n == 0:
        return None, None, _Test(0.0, 1.0, 0.0, "none")

    def values_at(idx: np.ndarray) -> tuple[float | None, float | None]:
        docs = [documents[i] for i in idx.tolist()]
        return (aggregate({k: v[idx] for k, v in baseline.items()}, docs),
                aggregate({k: v[idx] for k, v in candidate.items()}, docs))

    base_value, cand_value = values_at(np.arange(n))
    if base_value is None or cand_value is None:
        return base_value, cand_value, _Test(0.0, 1.0, 0.0, "none")
    delta = _oriented(cand_value, direction, ideal) - _oriented(base_value, direction, ideal)
    rng = np.random.Generator(np.random.PCG64(seed))
    deltas = []
    for _ in range(n_resamples):
        b, c = values_at(rng.integers(0, n, size=n))
        if b is not None and c is not None:
            deltas.append(_oriented(c, direction, ideal) - _oriented(b, direction, ideal))
    p_value, se = bootstrap_p_value_and_se(np.asarray(deltas))
    return base_value, cand_value, _Test(float(delta), p_value, se, "bootstrap")


def compare(
    baseline: BaselineRecord, candidate: BaselineRecord, tolerance: Tolerance, documents: Sequence[Any] | None = None
) -> TaskComparison:
    """Gate the candidate against the baseline. Both must be comparable (`comparability_problems` empty).

    `documents`: the candidate's DocumentRequests, in the candidate record's order; required when a metric has its
    own aggregate (ValueError without them: an entry is never left out).
    """
    position = {key: i for i, key in enumerate(baseline.doc_keys)}
    missing = [key for key in candidate.doc_keys if key not in position]
    if missing or len(position) != len(candidate.doc_keys):
        raise ValueError("baseline and candidate hold different documents; check comparability first")
    order = np.array([position[key] for key in candidate.doc_keys], dtype=int)
    categories = np.array(
        ["" if c is None else c for c in candidate.doc_categories], dtype=object
    )
    groups: list[tuple[str | None, np.ndarray]] = [(None, np.ones(len(order), dtype=bool))]
    if candidate.category_field is not None:
        groups += [(c, categories == c) for c in sorted(set(categories.tolist()))]

    base_values = {name: np.asarray(v, dtype=float)[order] for name, v in baseline.values.items()}
    cand_values = {name: np.asarray(v, dtype=float) for name, v in candidate.values.items()}
    entries: list[Entry] = []
    for metric in candidate.metrics:
        direction_label = f"ideal {metric.ideal:g}" if metric.direction == "ideal" else metric.direction
        seed = functools.partial(_seed, candidate.task, metric.name)
        tests = []
        if metric.aggregate:
            aggregate = _registered_aggregate(metric.name)
            if aggregate is None or documents is None:  # never drop an entry: the caller must pass the documents
                raise ValueError(f"metric '{metric.name}' is an aggregate: compare() needs the candidate's documents")
            for category, mask in groups:
                idx = np.flatnonzero(mask)
                base_value, cand_value, test = aggregate_test(
                    aggregate, {k: v[idx] for k, v in base_values.items()}, {k: v[idx] for k, v in cand_values.items()},
                    [documents[i] for i in idx], direction=metric.direction, ideal=metric.ideal, seed=seed(category),
                    n_resamples=resamples_for(AGGREGATE_RESAMPLES, len(groups) - 1, tolerance.alpha),
                )
                if base_value is None or cand_value is None:
                    raise ValueError(f"metric '{metric.name}': the aggregate is undefined on {len(idx)} documents")
                tests.append((category, len(idx), base_value, cand_value, test))
        else:
            for category, mask in groups:
                base, cand = base_values[metric.name][mask], cand_values[metric.name][mask]
                if base.size == 0:
                    continue
                test = paired_test(
                    base, cand, direction=metric.direction, ideal=metric.ideal, binary=metric.binary,
                    seed=seed(category), n_resamples=resamples_for(N_RESAMPLES, len(groups) - 1, tolerance.alpha),
                )
                tests.append((category, int(base.size), float(np.mean(base)), float(np.mean(cand)), test))
        if not tests:
            continue
        overall = [t for t in tests if t[0] is None]
        by_category = [t for t in tests if t[0] is not None]
        adjusted = [t[4].p_value for t in overall] + holm_adjust([t[4].p_value for t in by_category])
        for (category, n, base_value, cand_value, test), p_value in zip(overall + by_category, adjusted):
            margin = tolerance.margin_for(base_value)
            judgement = judge(
                test.delta, p_value=p_value, standard_error=test.standard_error, margin=margin,
                alpha=tolerance.alpha,
            )
            entries.append(
                Entry(
                    metric=metric.name, category=category, n=n, baseline=base_value,
                    candidate=cand_value, delta=test.delta, margin=margin, p_value=p_value,
                    raw_p_value=test.p_value, mde=judgement.mde, verdict=judgement.verdict, test=test.test,
                    direction=direction_label,
                )
            )
    return TaskComparison(candidate.task, tuple(entries), len(order), tolerance)
