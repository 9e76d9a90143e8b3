"""Pooled entries: a suite's mean accuracy over the paired documents of all its gated tasks, gated on its own.

A quantized or distilled checkpoint is often a little worse on every task, each inside its margin: no task entry can
block it, though the suite as a whole clearly regressed. A pooled entry asks the suite's question directly: over
every document of the suite's compared tasks, is the candidate worse than the baseline by more than the pooled
margin (half the tasks' own margin: 0.5 points for an accuracy)? Tasks are pooled by their documents, so a task with
more documents weighs more, as in a mean over the suite's documents.

Document identity and clusters. A document is its key (gate/baseline.py `document_keys`): one that several pooled
tasks hold (a group gated beside its tasks, a bundle member gated as a task too, the same file served to two tasks)
enters the pool once, from the first of them by name. Documents that are different but related (one ARC question in
12 languages or 3 formats, one StereoSet target's sentences) share a cluster id, which a task declares in its YAML
(`modelbench.gate.cluster`: a field or a template, the same id in every task over the same source); a document of a
task that declares none is its own cluster, named by its key. The pooled test is a task's overall 0/1 test with
clusters in place of documents: the cluster-robust paired standard error (statistics.clustered_paired_standard_error:
differences summed per cluster, the variance taken over clusters, CR1), McNemar's tail over clusters as a floor (a
sign test of the clusters' summed differences), the p-value from Student's t with G − 1 degrees of freedom. With one
document a cluster all three are exactly the unclustered ones (the normal p-value).

What pools: a metric that is 0/1 per document with a higher or lower direction (the accuracies), scored by at least
two gated task items of one suite. Each compared task ships its sufficient statistics (`PoolingStats`) with its result,
so the pooled entry is the same wherever the tasks ran (one process, xdist workers, shards merged).

Alpha. A suite's pooled entries are one more family in the session's weighted Bonferroni split
(gate/alpha_split.py): its weight is half the summed weights of the suite's gated items (so the suite's diffuse
question holds a third of the suite's alpha) unless the ini's `modelbench_gate_weights` sets `<suite>/* = <weight>`;
its metrics share that level by Holm. See docs/baseline-gate.md, "Pooled entries".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from pytest_modelbench.gate.statistics import (
    Verdict,
    cluster_labels,
    cluster_signs,
    clustered_paired_standard_error,
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
    """One task's overall entry of a poolable metric, document by document: what a pooled entry needs to count a
    document that several pooled tasks hold once, and to sum the paired differences of related documents.

    `keys`: the documents' keys (gate/baseline.py `document_keys`: what the model sees and what is scored), sorted;
    `baseline`, `candidate`: each document's 0/1 value as reported (not oriented), one character each, in key order;
    `clusters`: each document's cluster id (its task's `modelbench.gate.cluster`), None for a document of a task that
    declares none (its own cluster); None when no document has one."""

    metric: str
    direction: str  # higher | lower
    margin: float  # the task's own margin of the entry
    keys: tuple[str, ...]
    baseline: str
    candidate: str
    clusters: tuple[str | None, ...] | None = None
    unscored: int = 0  # the task's documents left unscored (--early-stop; gate/early_stop.py, "Pooled entries")

    @classmethod
    def of(cls, metric: str, baseline: np.ndarray, candidate: np.ndarray, direction: str, margin: float,
           keys: Sequence[str], clusters: Sequence[str | None] = ()) -> "PoolingStats":
        order = sorted(range(len(keys)), key=keys.__getitem__)
        declared = tuple(clusters[i] for i in order) if any(c is not None for c in clusters) else None
        return cls(metric, direction, float(margin), tuple(keys[i] for i in order), _bits(baseline[order]),
                   _bits(candidate[order]), declared)

    @property
    def n(self) -> int:
        return len(self.keys)

    @property
    def differences(self) -> np.ndarray:
        """The oriented paired differences d (positive = better), in key order."""
        sign = 1 if self.direction == "higher" else -1
        return sign * (_values(self.candidate) - _values(self.baseline))

    @property
    def delta_sum(self) -> float:
        return float(self.differences.sum())

    @property
    def delta_square_sum(self) -> float:
        return float(np.count_nonzero(self.differences))

    def as_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "direction": self.direction, "margin": self.margin, "keys": list(self.keys),
                "baseline": self.baseline, "candidate": self.candidate,
                "clusters": None if self.clusters is None else list(self.clusters), "unscored": self.unscored}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "PoolingStats":
        stats = cls(raw["metric"], raw["direction"], float(raw["margin"]), tuple(raw["keys"]), raw["baseline"],
                    raw["candidate"], None if raw["clusters"] is None else tuple(raw["clusters"]),
                    int(raw["unscored"]))
        lengths = {len(stats.keys), len(stats.baseline), len(stats.candidate),
                   len(stats.keys if stats.clusters is None else stats.clusters)}
        if len(lengths) != 1 or set(stats.baseline + stats.candidate) - {"0", "1"} \
                or stats.direction not in ("higher", "lower"):
            raise ValueError(f"pooling statistics of '{stats.metric}': one key, one 0/1 value on each side (and one "
                             "cluster) per document, and a direction higher or lower")
        return stats


def _bits(values: np.ndarray) -> str:
    return "".join("1" if v == 1 else "0" for v in np.asarray(values).tolist())


def _values(bits: str) -> np.ndarray:
    return np.frombuffer(bits.encode("ascii"), dtype=np.uint8).astype(np.int64) - ord("0")


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
        judgement = judge(delta, p_worse=p_value, p_better=better, standard_error=se, margin=margin, alpha=level,
                          mde=mde)
        entries.append(PooledEntry(
            suite=suite, metric=metric, tasks=tuple(task for task, _ in members), n=n,
            baseline=documents.baseline_sum / n, candidate=documents.candidate_sum / n,
            delta=delta, margin=margin, standard_error=se, p_value=judgement.p_value, mde=mde, level=level,
            verdict=judgement.verdict, unscored=sum(s.unscored for _, s in members),
        ))
    return entries


@dataclass(frozen=True)
class PooledDocuments:
    """A pooled entry's documents: each document key once (held by the first pooled task, by name, that has it),
    with its oriented difference, its task's margin and its cluster."""

    differences: np.ndarray
    margins: np.ndarray
    clusters: np.ndarray  # integer labels (statistics.cluster_labels)
    baseline_sum: float
    candidate_sum: float

    @property
    def n(self) -> int:
        return int(self.differences.size)


def pooled_documents(members: Sequence[PoolingStats]) -> PooledDocuments:
    """The documents of `members` (a pooled entry's statistics, in task order), a document shared by several of them
    counted once. A document of a task declaring no cluster is its own cluster, named by its key, so the same
    document in two such tasks is one cluster too."""
    seen: set[str] = set()
    differences, margins, clusters, base_sum, cand_sum = [], [], [], 0, 0
    for stats in members:
        d, base, cand = stats.differences, _values(stats.baseline), _values(stats.candidate)
        fresh = [i for i, key in enumerate(stats.keys) if key not in seen]
        seen.update(stats.keys)
        differences.append(d[fresh])
        margins.append(np.full(len(fresh), stats.margin))
        declared = stats.clusters or (None,) * stats.n
        clusters += [("document", stats.keys[i]) if declared[i] is None else ("cluster", declared[i]) for i in fresh]
        base_sum += int(base[fresh].sum())
        cand_sum += int(cand[fresh].sum())
    return PooledDocuments(np.concatenate(differences).astype(float), np.concatenate(margins),
                           cluster_labels(clusters), float(base_sum), float(cand_sum))


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
    se = clustered_paired_standard_error(documents.differences, documents.clusters)
    margin = MARGIN_SHARE * float(documents.margins.mean())
    lost, gained = cluster_signs(documents.differences, documents.clusters)
    groups = int(documents.clusters.max()) + 1 if documents.n else 0
    df = groups - 1 if 1 < groups < documents.n else None  # Student's t where a cluster holds several documents
    worse = max(worse_than_margin_pvalue(delta, se, margin, df), mcnemar_one_sided_pvalue(lost, gained))
    better = max(worse_than_margin_pvalue(-delta, se, margin, df), mcnemar_one_sided_pvalue(gained, lost))
    return worse, better, documents, delta, se, margin
