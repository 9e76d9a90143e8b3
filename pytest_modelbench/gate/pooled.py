"""Pooled entries: a suite's mean accuracy over the paired documents of all its gated tasks, gated on its own.

A quantized or distilled checkpoint is often a little worse on every task, each inside its margin: no task entry can
block it, though the suite as a whole clearly regressed. A pooled entry asks the suite's question directly: over
every document of the suite's compared tasks, is the candidate worse than the baseline by more than the pooled
margin (half the tasks' own margin: 0.5 points for an accuracy)? Tasks are pooled by their documents, so a task with
more documents weighs more, as in a mean over the suite's documents; a document several tasks hold counts once, and
related documents share a cluster (evidence/pooling.py). The pooled test is a task's overall 0/1 test with clusters in
place of documents: the cluster-robust paired standard error (evidence/paired.py: differences summed per cluster, the
variance taken over clusters, CR1), McNemar's tail over clusters as a floor (a sign test of the clusters' summed
differences), the p-value from Student's t with G − 1 degrees of freedom. With one document a cluster all three are
exactly the unclustered ones (the normal p-value).

What pools: a metric that is 0/1 per document with a higher or lower direction (the accuracies), scored by at least
two gated task items of one suite. Each compared task ships its sufficient statistics (`PoolingStats`) with its result,
so the pooled entry is the same wherever the tasks ran (one process, xdist workers, shards merged).

Alpha. A suite's pooled entries are one more family in the session's weighted Bonferroni split
(gate/alpha_split.py): its weight is half the summed weights of the suite's gated items (so the suite's diffuse
question holds a third of the suite's alpha) unless the ini's `modelbench_gate_weights` sets `<suite>/* = <weight>`;
its metrics share that level by Holm. See docs/error-rates.md, "Pooled entries".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from pytest_modelbench.gate.evidence.clusters import cluster_df, cluster_signs
from pytest_modelbench.gate.evidence.paired import paired_standard_error
from pytest_modelbench.gate.evidence.pooling import PooledDocuments, PoolingStats, pooled_documents
from pytest_modelbench.gate.evidence.significance import (
    detectable_regression,
    holm_adjust,
    mcnemar_one_sided_pvalue,
    worse_than_margin_pvalue,
)
from pytest_modelbench.gate.verdict import Verdict, judge_entry

MARGIN_SHARE = 0.5  # of the tasks' own margin
WEIGHT_SHARE = 0.5  # of the suite's gated items' weights
POWER = 0.8
POOLED_SUFFIX = "/*"  # a suite's pooled key: '<suite>/*'


def poolable(binary: bool, direction: str) -> bool:
    return binary and direction in ("higher", "lower")


def pooled_key(suite: str) -> str:
    return suite + POOLED_SUFFIX


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
    for (metric, members), (_, _, documents, delta, se, margin), p_value, better in zip(pooled, tests, adjusted,
                                                                                       adjusted_better):
        n = documents.n
        mde = detectable_regression(se, margin, level / len(pooled), POWER, binary_documents=n)
        judgement = judge_entry(delta, p_worse=p_value, p_better=better, standard_error=se, margin=margin,
                                alpha=level, mde=mde)
        entries.append(PooledEntry(
            suite=suite, metric=metric, tasks=tuple(task for task, _ in members), n=n,
            baseline=documents.baseline_sum / n, candidate=documents.candidate_sum / n,
            delta=delta, margin=margin, standard_error=se, p_value=judgement.p_value, mde=mde, level=level,
            verdict=judgement.verdict, unscored=sum(s.unscored for _, s in members),
        ))
    return entries


def suite_pooled_entries(suite: str, compared: Sequence[Any], weight: float, *, session_split: bool
                         ) -> tuple[list[PooledEntry], dict[str, list[PoolingStats]]]:
    """(the suite's pooled entries, the statistics they pool by task) from its compared tasks' results (gate/result.py
    GateResult: task, alpha, total_weight and the recorded `pooling`), the family at the suite's `weight` of the
    session's split (`session_split`), else at the tasks' alpha."""
    alpha = min(r.alpha for r in compared if r.alpha is not None)
    level = alpha * weight / compared[0].total_weight if session_split else alpha
    stats = {r.task: [PoolingStats.from_json(raw) for raw in r.pooling] for r in compared}
    return pooled_entries(suite, stats, alpha=alpha, level=level), stats


def _pooled_test(members: Sequence[tuple[str, PoolingStats]]) -> tuple[float, float, PooledDocuments, float, float,
                                                                         float]:
    """(p_worse, p_better, documents, delta, standard error, margin) of the pooled documents: the cluster-robust
    paired standard error with Student's t over G − 1 degrees of freedom where a cluster holds several documents,
    floored by McNemar's tail over clusters (a sign test of the clusters' summed differences: discordant documents of
    one cluster are not independent)."""
    documents = pooled_documents([s for _, s in members])
    delta = float(documents.differences.mean())
    se = paired_standard_error(documents.differences, documents.clusters)
    margin = MARGIN_SHARE * float(documents.margins.mean())
    lost, gained = cluster_signs(documents.differences, documents.clusters)
    df = cluster_df(documents.clusters, normal_for_single_documents=True)
    worse = max(worse_than_margin_pvalue(delta, se, margin, df), mcnemar_one_sided_pvalue(lost, gained))
    better = max(worse_than_margin_pvalue(-delta, se, margin, df), mcnemar_one_sided_pvalue(gained, lost))
    return worse, better, documents, delta, se, margin
