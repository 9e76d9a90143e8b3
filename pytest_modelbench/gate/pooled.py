"""Pooled entries: a suite's mean accuracy over the paired documents of all its gated tasks, gated on its own.

A quantized or distilled checkpoint is often a little worse on every task, each inside its margin: no task entry can
block it, though the suite as a whole clearly regressed. A pooled entry asks the suite's question directly: over
every document of the suite's compared tasks, is the candidate worse than the baseline by more than the pooled
margin (half the tasks' own margin: 0.5 points for an accuracy)? It is tested like a task's overall 0/1 entry: the
paired standard error of the pooled per-document differences, McNemar's tail as a floor. Tasks are pooled by their
documents, so a task with more documents weighs more, as in a mean over the suite's documents.

What pools: a metric that is 0/1 per document with a higher or lower direction (the accuracies), scored by at least
two gated task items of one suite. Each compared task ships its sufficient statistics (`PoolingStats`) with its result,
so the pooled entry is the same wherever the tasks ran (one process, xdist workers, shards merged).

Alpha. A suite's pooled entries are one more family in the session's weighted Bonferroni split
(gate/alpha_split.py): its weight is half the summed weights of the suite's gated items (so the suite's diffuse
question holds a third of the suite's alpha) unless the ini's `modelbench_gate_weights` sets `<suite>/* = <weight>`;
its metrics share that level by Holm. See docs/baseline-gate.md, "Pooled entries".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from pytest_modelbench.gate.statistics import (
    Verdict,
    detectable_regression,
    holm_adjust,
    judge,
    mcnemar_one_sided_pvalue,
    worse_than_margin_pvalue,
)

MARGIN_SHARE = 0.5  # of the tasks' own margin
WEIGHT_SHARE = 0.5  # of the suite's gated items' weights
POWER = 0.8
POOLED_SUFFIX = "/*"  # a suite's pooled key: '<suite>/*'


def poolable(binary: bool, direction: str) -> bool:
    return binary and direction in ("higher", "lower")


def pooled_key(suite: str) -> str:
    return suite + POOLED_SUFFIX


@dataclass(frozen=True)
class PoolingStats:
    """One task's overall entry of a poolable metric, as sufficient statistics of its oriented per-document
    differences d (positive = better)."""

    metric: str
    n: int
    baseline_sum: float  # of the metric's values, as reported (not oriented)
    candidate_sum: float
    delta_sum: float  # Σ d
    delta_square_sum: float  # Σ d²
    lost: int  # good for the baseline, bad for the candidate
    gained: int
    margin: float  # the task's own margin of the entry
    unscored: int = 0  # the task's documents left unscored (--early-stop; gate/early_stop.py, "Pooled entries")

    @classmethod
    def of(cls, metric: str, baseline: np.ndarray, candidate: np.ndarray, direction: str,
           margin: float) -> "PoolingStats":
        sign = 1.0 if direction == "higher" else -1.0
        good_base, good_cand = (baseline == 1, candidate == 1) if sign > 0 else (baseline == 0, candidate == 0)
        d = sign * (candidate - baseline)
        return cls(metric, int(d.size), float(baseline.sum()), float(candidate.sum()), float(d.sum()),
                   float(np.dot(d, d)), int(np.count_nonzero(good_base & ~good_cand)),
                   int(np.count_nonzero(~good_base & good_cand)), float(margin))

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "PoolingStats":
        return cls(**raw)


@dataclass(frozen=True)
class PooledEntry:
    suite: str
    metric: str
    tasks: tuple[str, ...]  # the compared tasks pooled
    n: int
    baseline: float
    candidate: float
    delta: float
    margin: float
    standard_error: float
    p_value: float  # Holm-adjusted over the suite's pooled entries (improved: of "not better than +margin", likewise)
    mde: float
    level: float  # the family's level: alpha × weight / total weight
    verdict: Verdict
    unscored: int = 0  # the pooled tasks' documents left unscored (--early-stop): the verdict is the full run's

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "tasks": list(self.tasks), "verdict": self.verdict.value}


def pooled_suites(item_metrics: Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    """The suites that get pooled entries, with their poolable metrics: those scored by two or more of the suite's
    gated items. `item_metrics`: each gated item's poolable metric names by '<suite>/<task>' key."""
    counts: dict[str, dict[str, int]] = {}
    for key, metrics in item_metrics.items():
        suite = key.split("/", 1)[0]
        for metric in set(metrics):
            counts.setdefault(suite, {}).setdefault(metric, 0)
            counts[suite][metric] += 1
    pooled = {suite: tuple(sorted(m for m, count in by_metric.items() if count >= 2))
              for suite, by_metric in counts.items()}
    return {suite: metrics for suite, metrics in sorted(pooled.items()) if metrics}


def pooled_entries(suite: str, stats_by_task: Mapping[str, Sequence[PoolingStats]], *, alpha: float,
                   level: float) -> list[PooledEntry]:
    """The suite's pooled entries from its compared tasks' statistics; `level`: the family's share of alpha."""
    by_metric: dict[str, list[tuple[str, PoolingStats]]] = {}
    for task, stats in sorted(stats_by_task.items()):
        for s in stats:
            by_metric.setdefault(s.metric, []).append((task, s))
    pooled = [(metric, members) for metric, members in sorted(by_metric.items()) if len(members) >= 2]
    tests = [_pooled_test(members) for _, members in pooled]
    adjusted = holm_adjust([worse for worse, *_ in tests]) if tests else []
    adjusted_better = holm_adjust([better for _, better, *_ in tests]) if tests else []
    entries = []
    for (metric, members), (_, _, n, delta, se, margin), p_value, better in zip(pooled, tests, adjusted,
                                                                               adjusted_better):
        mde = detectable_regression(se, margin, level / len(pooled), POWER, binary_documents=n)
        judgement = judge(delta, p_worse=p_value, p_better=better, standard_error=se, margin=margin, alpha=level,
                          mde=mde)
        entries.append(PooledEntry(
            suite=suite, metric=metric, tasks=tuple(task for task, _ in members), n=n,
            baseline=sum(s.baseline_sum for _, s in members) / n, candidate=sum(s.candidate_sum for _, s in members) / n,
            delta=delta, margin=margin, standard_error=se, p_value=judgement.p_value, mde=mde, level=level,
            verdict=judgement.verdict, unscored=sum(s.unscored for _, s in members),
        ))
    return entries


def _pooled_test(members: Sequence[tuple[str, PoolingStats]]) -> tuple[float, float, int, float, float, float]:
    """(p_worse, p_better, n, delta, standard error, margin) of the pooled documents."""
    n = sum(s.n for _, s in members)
    delta = sum(s.delta_sum for _, s in members) / n
    square = sum(s.delta_square_sum for _, s in members)
    variance = max(0.0, (square - n * delta * delta) / (n - 1)) if n > 1 else 0.0
    se = math.sqrt(variance / n) if n > 1 else 0.0
    margin = MARGIN_SHARE * sum(s.margin * s.n for _, s in members) / n
    lost, gained = sum(s.lost for _, s in members), sum(s.gained for _, s in members)
    worse = max(worse_than_margin_pvalue(delta, se, margin), mcnemar_one_sided_pvalue(lost, gained))
    better = max(worse_than_margin_pvalue(-delta, se, margin), mcnemar_one_sided_pvalue(gained, lost))
    return worse, better, n, delta, se, margin
