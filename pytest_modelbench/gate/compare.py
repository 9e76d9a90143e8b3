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

import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pytest_modelbench.gate.baseline import BaselineRecord, Tolerance
from pytest_modelbench.gate.statistics import (
    Verdict,
    holm_adjust,
    judge,
    mcnemar_pvalue,
    paired_binary_standard_error,
    paired_bootstrap,
)

N_RESAMPLES = 2000
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


def _seed(task: str, metric: str, category: str | None) -> int:
    return zlib.crc32(f"{task}\x00{metric}\x00{category}".encode("utf-8"))


def paired_test(
    baseline: np.ndarray, candidate: np.ndarray, *, direction: str, ideal: float | None, binary: bool, seed: int = 0
) -> _Test:
    """Oriented delta (positive = better), two-sided p-value and standard error of the delta."""
    base = np.asarray(baseline, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    if base.size == 0:
        return _Test(0.0, 1.0, 0.0, "none")
    if direction == "ideal":
        target = float(ideal)

        def closeness(values: np.ndarray) -> float:
            return -abs(float(np.mean(values)) - target)

        result = paired_bootstrap(base, cand, statistic=closeness, n_resamples=N_RESAMPLES, seed=seed)
        return _Test(result.delta, result.p_value, result.standard_error, "bootstrap")
    sign = 1.0 if direction == "higher" else -1.0
    if binary:
        good_base, good_cand = (base == 1, cand == 1) if sign > 0 else (base == 0, cand == 0)
        lost = int(np.count_nonzero(good_base & ~good_cand))
        gained = int(np.count_nonzero(~good_base & good_cand))
        delta = sign * float(np.mean(cand) - np.mean(base))
        return _Test(delta, mcnemar_pvalue(lost, gained), paired_binary_standard_error(base, cand), "mcnemar")
    result = paired_bootstrap(sign * base, sign * cand, n_resamples=N_RESAMPLES, seed=seed)
    return _Test(result.delta, result.p_value, result.standard_error, "bootstrap")


def compare(baseline: BaselineRecord, candidate: BaselineRecord, tolerance: Tolerance) -> TaskComparison:
    """Gate the candidate against the baseline. Both must be comparable (`comparability_problems` empty)."""
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

    entries: list[Entry] = []
    for metric in candidate.metrics:
        base_all = np.asarray(baseline.values[metric.name], dtype=float)[order]
        cand_all = np.asarray(candidate.values[metric.name], dtype=float)
        direction_label = f"ideal {metric.ideal:g}" if metric.direction == "ideal" else metric.direction
        tests = []
        for category, mask in groups:
            base, cand = base_all[mask], cand_all[mask]
            tests.append(
                (category, base, cand, paired_test(
                    base, cand, direction=metric.direction, ideal=metric.ideal, binary=metric.binary,
                    seed=_seed(candidate.task, metric.name, category),
                ))
            )
        adjusted = [tests[0][3].p_value]
        if len(tests) > 1:
            adjusted += holm_adjust([t[3].p_value for t in tests[1:]])
        for (category, base, cand, test), p_value in zip(tests, adjusted):
            base_value = float(np.mean(base)) if base.size else 0.0
            cand_value = float(np.mean(cand)) if cand.size else 0.0
            margin = tolerance.margin_for(base_value)
            judgement = judge(
                test.delta, p_value=p_value, standard_error=test.standard_error, margin=margin,
                alpha=tolerance.alpha,
            )
            entries.append(
                Entry(
                    metric=metric.name, category=category, n=int(base.size), baseline=base_value,
                    candidate=cand_value, delta=test.delta, margin=margin, p_value=p_value,
                    raw_p_value=test.p_value, mde=judgement.mde, verdict=judgement.verdict, test=test.test,
                    direction=direction_label,
                )
            )
    return TaskComparison(candidate.task, tuple(entries), len(order), tolerance)


def worst(entries: Sequence[Entry]) -> Entry | None:
    return min(entries, key=lambda e: (VERDICT_RANK[e.verdict], e.delta + e.margin), default=None)
