"""The evidence a suite's pooled entries (pooled.py) pool: each compared task's sufficient statistics (`PoolingStats`),
and the pooled documents they make together (`pooled_documents`).

Document identity and clusters. A document is its key (tasks/requests.py `DocumentRequests.key`): one that several
pooled tasks hold (a group gated beside its tasks, a bundle member gated as a task too, the same file served to two
tasks) enters the pool once, from the first of them by name. Documents that are different but related (one ARC
question in 12 languages or 3 formats, one StereoSet target's sentences) share a cluster id, which a task declares in
its YAML (`modelbench.gate.cluster`: a field or a template, the same id in every task over the same source); a
document of a task that declares none is its own cluster, named by its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_modelbench.gate.evidence.clusters import cluster_labels


@dataclass(frozen=True)
class PoolingStats:
    """One task's overall entry of a poolable metric, document by document: what a pooled entry needs to count a
    document that several pooled tasks hold once, and to sum the paired differences of related documents.

    `keys`: the documents' keys (tasks/requests.py `DocumentRequests.key`: what the model sees and what is scored),
    sorted;
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
class PooledDocuments:
    """A pooled entry's documents: each document key once (held by the first pooled task, by name, that has it),
    with its oriented difference, its task's margin and its cluster."""

    differences: np.ndarray
    margins: np.ndarray
    clusters: np.ndarray  # integer labels (clusters.cluster_labels)
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
