"""A group's scores from its leaf tasks' evaluations, as lm-eval 0.4.13 aggregates them (api/group.py), in the form
the gate reads for a task: documents, per-document values, scores overall and per category.

The group's documents are its leaf tasks' documents, in tree order, each in the category of its task. Every
subgroup is a category too: the union of its leaf tasks. A metric of `aggregate_metric_list` is aggregated, per
filter, over the leaf tasks that score it (documents of the others hold no value for it and are left out):
  weight_by_size (default)  Σ m_i·n_i / Σ n_i; stderr pooled: sqrt(Σ (n_i − 1)·se_i²·n_i / (Σ n_i − k) / Σ n_i).
                            When every task's value is a mean over its documents this is the mean over the group's
                            documents, gated per document like a task's accuracy;
  weight_by_size: false     the plain mean of the tasks' values; stderr sqrt(Σ se_i²) / k.
Otherwise (unweighted, or a task whose metric has its own aggregate: f1, perplexity, IFEval's instruction-level
accuracy) the group's value is a GroupAggregate over the per-document values, which the gate re-applies to resampled
documents. A subgroup's category is aggregated as its parent group aggregates the metric (the top group's setting).
A metric derived from other metrics (StereoSet's icat) has no per-document values to pair and is refused.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.metrics.aggregate import MetricSummary, TaskScores
from pytest_modelbench.metrics.registry import Metric
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.gate_block import GateTolerance
from pytest_modelbench.tasks.groups import AggregateMetric, GroupTree, ScorableGroup, bundle_members, tree_hash
from pytest_modelbench.tasks.identity import TaskId
from pytest_modelbench.tasks.requests import DocumentRequests, key_digest, key_numbered_after

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
    integrity: Any = None  # its leaf tasks' integrity together (run/runner.py, gate/integrity.py combined)
    # each leaf task's integrity (None: not counted), its unscored documents keyed in the group's numbering
    leaf_integrities: tuple[Any, ...] = ()


@dataclass(frozen=True)
class GroupAggregate:
    """A group metric that is not the plain mean over its documents: each task's value over the documents given (its
    metric's own aggregate, or the mean), then lm-eval's mean of the tasks' values, weighted by how many documents each
    has (weight_by_size) or not. The gate re-applies it to resampled documents, as it does a task's own aggregate."""

    key: str
    task_metrics: Mapping[str, tuple[str, Any]]  # task → (its metric's name, that metric's aggregate or None: the mean)
    weighted: bool

    def __call__(self, values: Mapping[str, np.ndarray], documents: Sequence[DocumentRequests]) -> float | None:
        column = values[self.key]
        categories = np.array([doc.category for doc in documents], dtype=object)
        scores, sizes = [], []
        for task, (name, aggregate) in self.task_metrics.items():
            mask = categories == task
            if not mask.any():
                continue
            items = dense(column[mask])
            value = float(np.mean(items)) if aggregate is None else aggregate(
                {name: items}, [doc for doc, keep in zip(documents, mask) if keep])
            if value is None:
                return None
            scores.append(value)
            sizes.append(int(mask.sum()))
        return float(np.average(scores, weights=sizes if self.weighted else None)) if scores else None


def dense(values: np.ndarray) -> np.ndarray:
    """A column's cells as a task's own metric holds them: numbers, or each document's list (a corpus score's
    statistics; IFEval's per-instruction outcomes)."""
    try:
        return np.array(list(values), dtype=float)
    except (TypeError, ValueError):  # lists of different lengths
        return np.array(list(values), dtype=object)


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
        if metric.per_document is None or metric.inputs:
            raise TaskConfigError(f"{source}: group metric '{name}': task '{leaf}' derives it from other metrics, so "
                                  "it has no per-document values of its own for the group to pair")
        if metric.direction != first.direction:
            raise TaskConfigError(f"{source}: group metric '{name}': its tasks disagree on whether higher is better")
    plain = spec.weight_by_size and all(m.aggregate is None for m in scored.values())
    return Metric(
        name=name, per_document=first.per_document, direction=first.direction,
        binary=plain and all(m.binary for m in scored.values()), margin=first.margin,
        aggregate=None if plain else GroupAggregate(
            name, {leaf: (m.name, m.aggregate) for leaf, m in scored.items()}, spec.weight_by_size),
    )


def gated_members(group: ScorableGroup) -> list[tuple[str, ScorableGroup | tuple[TaskConfig, TaskId]]]:
    """What a group file gates, checked as collection checks a task file: the group itself, or a bundle's members
    (tasks/groups.py bundle_members). Refuses, naming the file, what cannot be scored."""
    members = bundle_members(group) if group.tree.config.is_bundle else [(group.tree.name, group)]
    for _, member in members:
        if isinstance(member, ScorableGroup):
            group_metrics(member.tree, {leaf.name: resolve_metrics(config) for leaf, config, _ in member.leaf_tasks})
        else:
            resolve_metrics(member[0])
    return members


def score_group(tree: GroupTree, leaf_evaluations: Mapping[str, Any]) -> GroupEvaluation:
    """`leaf_evaluations`: each leaf task's TaskEvaluation, by task name."""
    leaves = tree.leaves()
    evaluations = [leaf_evaluations[leaf.name] for leaf in leaves]
    metrics = group_metrics(tree, {leaf.name: e.scores.metrics for leaf, e in zip(leaves, evaluations)})
    before = _copies_before(evaluations)
    documents = [replace(doc.numbered_after(copies), category=leaf.name)
                 for leaf, e, copies in zip(leaves, evaluations, before) for doc in e.prepared.documents]
    categories = np.array([doc.category for doc in documents], dtype=object)
    per_document = {}
    for metric, scored in metrics:
        parts = {leaf.name: np.asarray(e.scores.per_document[scored[leaf.name]])
                 for leaf, e in zip(leaves, evaluations) if leaf.name in scored}
        if all(part.ndim == 1 and part.dtype != object for part in parts.values()):
            column = np.full(len(documents), np.nan)  # NaN: a document of a task that does not score the metric
        else:
            column = np.full(len(documents), None, dtype=object)
        for leaf_name, part in parts.items():
            for position, value in zip(np.flatnonzero(categories == leaf_name), part):
                column[position] = value
        per_document[metric.name] = column
    members = {sub.name: tuple(leaf.name for leaf in sub.leaves()) for sub in tree.subgroups()}
    weighted = {metric.name: metric.aggregate is None or metric.aggregate.weighted for metric, _ in metrics}
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
    integrities = tuple(_keyed_in_group(e.integrity, copies) for e, copies in zip(evaluations, before))
    return GroupEvaluation(prepared, loglikelihoods, scores, tuple(evaluations), leaf_integrities=integrities)


def _copies_before(leaf_evaluations: Sequence[Any]) -> list[dict[str, int]]:
    """Per leaf task, in tree order: how many copies of each document (by digest) the leaf tasks before it hold,
    scored or not. A leaf's k-th copy of a document is the group's (that many + k)-th, so the group's keys are one
    numbering over all its leaf tasks' documents, whichever of them were scored, as its baseline's are."""
    before: list[dict[str, int]] = []
    counts: Counter[str] = Counter()
    for evaluation in leaf_evaluations:
        before.append(dict(counts))
        counts.update(doc.digest for doc in evaluation.prepared.documents)
        if evaluation.integrity is not None:
            counts.update(key_digest(key) for key in evaluation.integrity.unscored_keys)
    return before


def _keyed_in_group(integrity: Any, copies: Mapping[str, int]) -> Any:
    """A leaf task's integrity with its unscored documents' keys numbered in the group (`_copies_before`)."""
    if integrity is None:
        return None
    return replace(integrity, unscored_keys=tuple(key_numbered_after(key, copies) for key in integrity.unscored_keys))


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
