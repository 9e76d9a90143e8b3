"""Clusters: documents a task declares related (`modelbench.gate.cluster`: one StereoSet target's sentences, one
question in several languages). Evidence counts clusters, not documents: labels, counts, Student's t degrees of
freedom, each cluster's members, and the sign of each cluster's summed difference (McNemar's test over clusters).
The cluster-robust standard error is paired.py's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

def cluster_labels(clusters: Sequence[object]) -> np.ndarray:
    """Integer labels 0..G-1 of documents' cluster ids, in order of first appearance; None is a cluster of its own."""
    labels: dict[object, int] = {}
    out = np.empty(len(clusters), dtype=int)
    for i, cluster in enumerate(clusters):
        key = ("document", i) if cluster is None else ("cluster", cluster)
        out[i] = labels.setdefault(key, len(labels))
    return out


def cluster_count(labels: np.ndarray) -> int:
    """G: the number of clusters among these labels."""
    return int(np.unique(np.asarray(labels, dtype=int)).size)


def cluster_df(labels: np.ndarray, *, normal_for_single_documents: bool = False) -> int | None:
    """Degrees of freedom of Student's t for a cluster-robust statistic over these labels: G − 1 (a few clusters'
    standard error is itself uncertain); None (the normal) below two clusters, and with `normal_for_single_documents`
    also where no cluster holds two documents.

    Two rules, kept as they were because one rule would change gate numbers: a task's entries (compare.py) use t
    wherever the task declares clusters, even on a category whose clusters are single documents; a pooled entry
    (pooled.py) mixes tasks that declare none (each document its own cluster) and is there the unclustered normal
    test, as a task's entry without clusters is."""
    groups = cluster_count(labels)
    if groups < 2 or (normal_for_single_documents and groups == np.asarray(labels).size):
        return None
    return groups - 1


def cluster_members(labels: np.ndarray) -> list[np.ndarray]:
    """The document positions of each cluster, by label."""
    _, inverse = np.unique(labels, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.cumsum(np.bincount(inverse))[:-1])


def cluster_signs(differences: np.ndarray, labels: np.ndarray) -> tuple[int, int]:
    """(clusters whose differences sum below 0, clusters whose sum above 0): the discordant counts of a sign test over
    clusters, McNemar's test for clustered pairs (`mcnemar_one_sided_pvalue` of them). One document a cluster gives
    the documents' own discordant counts."""
    _, labels = np.unique(np.asarray(labels, dtype=int), return_inverse=True)
    sums = np.bincount(labels, weights=np.asarray(differences, dtype=float))
    return int(np.count_nonzero(sums < 0)), int(np.count_nonzero(sums > 0))
