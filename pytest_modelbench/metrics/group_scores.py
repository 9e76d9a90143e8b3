"""A group's scores from its leaf tasks' evaluations, as lm-eval 0.4.13 aggregates them (api/group.py), in the form
the gate reads for a task: documents, per-document values, scores overall and per category.

The group's documents are its leaf tasks' documents, in tree order, each in the category of its task. Every
subgroup is a category too: the union of its leaf tasks. A metric of `aggregate_metric_list` is aggregated, per
filter, over the leaf tasks that score it (documents of the others hold NaN for it and are left out):
  weight_by_size (default)  Σ m_i·n_i / Σ n_i, the mean over the leaf tasks' documents; stderr pooled:
                            sqrt(Σ (n_i − 1)·se_i²·n_i / (Σ n_i − k) / Σ n_i);
  weight_by_size: false     the plain mean of the leaf tasks' values (an aggregate the gate re-applies to resampled
                            documents); stderr sqrt(Σ se_i²) / k.
A subgroup's category is aggregated as its parent group aggregates the metric (the top group's setting). A leaf
metric that is not a mean over documents (f1, bleu, perplexity, StereoSet's scores) cannot be averaged into a group
and is refused, naming the task.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.metrics.aggregate import MetricSummary, TaskScores
from pytest_modelbench.metrics.registry import Metric
from pytest_modelbench.tasks.config import GateTolerance
from pytest_modelbench.tasks.groups import AggregateMetric, GroupTree, tree_hash
from pytest_modelbench.tasks.requests import DocumentRequests

CATEGORY_FIELD = "task"  # a group's documents are in the category of their leaf task
NO_FILTER_NAME = "none"


@dataclass(frozen=True)
class GroupScoredConfig:
    """What the gate and the reports read of a scored item's config, for a group."""

    task: str  # the group's name
    source: Path
    gate: GateTolerance
    config_hash: str
    output_type: str  # the leaf tasks' output type, or "mixed"
    version: Any
    category_field: str = CATEGORY_FIELD
    generation: None = None


@dataclass(frozen=True)
class GroupPrepared:
    config: GroupScoredConfig
    documents: list[DocumentRequests]
    num_fewshot: int
    limit: int | None
    data_fingerprint: str
    category_members: dict[str, tuple[str, ...]]  # subgroup → its leaf tasks
    prompt_label: str = ""


@dataclass(frozen=True)
class GroupEvaluation:
    """A group scored from its leaf tasks' evaluations (`leaves`, in tree order); reads like a TaskEvaluation."""

    prepared: GroupPrepared
    loglikelihoods: list[list[float]]
    scores: TaskScores
    leaves: tuple[Any, ...]
    generations: None = None
    answers: None = None
    greedy: None = None


@dataclass(frozen=True)
class UnweightedMean:
    """weight_by_size: false — the mean of the leaf tasks' means over the documents given (their categories)."""

    key: str

    def __call__(self, values: Mapping[str, np.ndarray], documents: Sequence[DocumentRequests]) -> float | None:
        column = np.asarray(values[self.key], dtype=float)
        categories = np.array([doc.category for doc in documents], dtype=object)
        means = [float(np.mean(column[(categories == c) & ~np.isnan(column)]))
                 for c in dict.fromkeys(categories.tolist()) if np.any((categories == c) & ~np.isnan(column))]
        return float(np.mean(means)) if means else None


def group_metric_name(metric: str, filter_name: str) -> str:
    """A group entry's name, as a task's: `acc` for lm-eval's `acc,none`, `exact_match,strict-match` otherwise."""
    return metric if filter_name == NO_FILTER_NAME else f"{metric},{filter_name}"


def _lm_eval_key(leaf_metric: str) -> tuple[str, str]:
    metric, _, filter_name = leaf_metric.partition(",")
    return metric, filter_name or NO_FILTER_NAME


def group_metrics(tree: GroupTree, leaf_metrics: Mapping[str, Sequence[Metric]]) -> list[tuple[Metric, dict[str, str]]]:
    """Each aggregated metric, and for it the leaf tasks that score it → their metric's name. Refuses what cannot be
    aggregated, naming the group file or the task."""
    config = tree.config
    if not config.aggregate_metrics:
        raise TaskConfigError(
            f"{config.source}: group '{config.group}' has no aggregate_metric_list, so lm-eval gives it no score and "
            "there is nothing to gate; its tasks are gated through their own files"
        )
    found: list[tuple[Metric, dict[str, str]]] = []
    for spec in config.aggregate_metrics:
        filters = spec.filter_list
        if filters is None:  # lm-eval's discovery: every `<metric>,<filter>` key of a leaf task, sorted
            filters = sorted({_lm_eval_key(m.name)[1] for metrics in leaf_metrics.values() for m in metrics
                              if _lm_eval_key(m.name)[0] == spec.metric})
        for filter_name in filters:
            scored = {leaf: m for leaf, metrics in leaf_metrics.items() for m in metrics
                      if _lm_eval_key(m.name) == (spec.metric, filter_name)}
            if scored:
                found.append((_aggregated_metric(config.source, spec, filter_name, scored),
                              {leaf: m.name for leaf, m in scored.items()}))
    if not found:
        names = ", ".join(spec.metric for spec in config.aggregate_metrics)
        raise TaskConfigError(f"{config.source}: group '{config.group}': none of its tasks scores {names}")
    return found


def _aggregated_metric(source: Path, spec: AggregateMetric, filter_name: str, scored: Mapping[str, Metric]) -> Metric:
    name = group_metric_name(spec.metric, filter_name)
    first = next(iter(scored.values()))
    for leaf, metric in scored.items():
        if metric.aggregate is not None or metric.per_document is None:
            raise TaskConfigError(f"{source}: group metric '{name}': task '{leaf}' scores it as an aggregate, not a "
                                  "mean over documents, so lm-eval's group mean of it cannot be paired per document")
        if metric.direction != first.direction:
            raise TaskConfigError(f"{source}: group metric '{name}': its tasks disagree on whether higher is better")
    return Metric(
        name=name, per_document=first.per_document, direction=first.direction,
        binary=all(m.binary for m in scored.values()), margin=first.margin,
        aggregate=None if spec.weight_by_size else UnweightedMean(name),
    )


def score_group(tree: GroupTree, leaf_evaluations: Mapping[str, Any]) -> GroupEvaluation:
    """`leaf_evaluations`: each leaf task's TaskEvaluation, by task name."""
    leaves = tree.leaves()
    evaluations = [leaf_evaluations[leaf.name] for leaf in leaves]
    metrics = group_metrics(tree, {leaf.name: e.scores.metrics for leaf, e in zip(leaves, evaluations)})
    documents = [replace(doc, category=leaf.name) for leaf, e in zip(leaves, evaluations) for doc in e.prepared.documents]
    categories = np.array([doc.category for doc in documents], dtype=object)
    per_document = {}
    for metric, scored in metrics:
        column = np.full(len(documents), np.nan)
        for leaf, e in zip(leaves, evaluations):
            if leaf.name in scored:
                column[categories == leaf.name] = e.scores.per_document[scored[leaf.name]]
        per_document[metric.name] = column
    members = {sub.name: tuple(leaf.name for leaf in sub.leaves()) for sub in tree.subgroups()}
    weighted = {metric.name: metric.aggregate is None for metric, _ in metrics}
    leaf_summaries = {leaf.name: e.scores.overall for leaf, e in zip(leaves, evaluations)}

    def block(names: Sequence[str]) -> dict[str, MetricSummary]:
        return {metric.name: _aggregate([leaf_summaries[n][scored[n]] for n in names if n in scored],
                                        weighted[metric.name]) for metric, scored in metrics}

    by_category = {sub: block(names) for sub, names in members.items()}
    for leaf in leaves:
        by_category[leaf.name] = block([leaf.name])
    scores = TaskScores(tree.name, tuple(m for m, _ in metrics), per_document,
                        block([leaf.name for leaf in leaves]), by_category)
    prepared_leaves = [e.prepared for e in evaluations]
    output_types = {p.config.output_type for p in prepared_leaves}
    limits = [p.limit for p in prepared_leaves]
    config = GroupScoredConfig(
        task=tree.name, source=tree.config.source, gate=tree.config.gate,
        config_hash=tree_hash(tree, {leaf.name: p.config.config_hash for leaf, p in zip(leaves, prepared_leaves)}),
        output_type=output_types.pop() if len(output_types) == 1 else "mixed", version=tree.config.version,
    )
    fingerprint = hashlib.sha256("\x00".join(p.data_fingerprint for p in prepared_leaves).encode()).hexdigest()[:16]
    prepared = GroupPrepared(
        config=config, documents=documents, num_fewshot=max(p.num_fewshot for p in prepared_leaves),
        limit=None if None in limits else max(limits), data_fingerprint=fingerprint, category_members=members,
        prompt_label=prepared_leaves[0].prompt_label,
    )
    loglikelihoods = [lls for e in evaluations for lls in e.loglikelihoods]
    return GroupEvaluation(prepared, loglikelihoods, scores, tuple(evaluations))


def _aggregate(summaries: Sequence[MetricSummary], weighted: bool) -> MetricSummary:
    """lm-eval's aggregate_subtask_metrics with pooled_sample_stderr (weighted) or unweighted_mean_stderr."""
    summaries = [s for s in summaries if s.value is not None]
    if not summaries:
        return MetricSummary(None, None, 0)
    sizes = [s.n for s in summaries]
    values = [s.value for s in summaries]
    total = sum(sizes)
    stderrs = [s.stderr for s in summaries]
    if weighted:
        value = sum(v * n for v, n in zip(values, sizes)) / total
        stderr = (None if None in stderrs or total == len(sizes) else
                  math.sqrt(sum((n - 1) * se ** 2 * n for n, se in zip(sizes, stderrs)) / (total - len(sizes)) / total))
    else:
        value = sum(values) / len(values)
        stderr = None if None in stderrs else math.sqrt(sum(se ** 2 for se in stderrs)) / len(stderrs)
    return MetricSummary(float(value), stderr, total)
