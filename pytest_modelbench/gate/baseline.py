"""A stored baseline's data model: what one task's record holds, how a candidate run's record is built from its
evaluation, and when two records cannot be compared ("re-baseline required").

One record per task and baseline name: per metric, the value, stderr and n overall and per category; the
per-document outcomes the paired tests need; the tolerance in force when it was recorded; and provenance (model and
weights fingerprint, task config hash, dataset fingerprint, limit, few-shot count, scoring protocol, dtype, batch
size, package versions, date); and, when it was recorded under --noise-floor, how much each entry moved when the same
checkpoint was scored a second time (NoiseFloor). Its file format (JSON, with a checksum) is baseline_file.py's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_modelbench.gate.provenance import Provenance, provenance_problems
from pytest_modelbench.metrics.registry import Direction, Margin
from pytest_modelbench.tasks.filters import INVALID_OUTPUT

@dataclass(frozen=True)
class MetricInfo:
    name: str
    direction: str  # higher | lower | ideal
    ideal: float | None
    binary: bool
    # Not a plain mean over documents (StereoSet lms / ss / icat): the task-level value comes from the metric's own
    # aggregate over the documents, and the gate re-applies it to resampled documents.
    aggregate: bool = False
    per_document: bool = True  # False: no per-document values of its own (icat, derived from lms and ss)
    # Per document a list of numbers of its own length (a process_results value for an `aggregation: !function`,
    # IFEval's inst_level_*): stored as a list cell, held as an object array of float arrays.
    lists: bool = False

    def as_direction(self) -> Direction:
        return Direction(self.direction, self.ideal)


@dataclass(frozen=True)
class Summary:
    value: float | None
    stderr: float | None
    n: int


@dataclass(frozen=True)
class Tolerance:
    """The resolved gate settings of one task.

    Margins: `metric_margins` per metric (the gate resolves one for every metric of the task); a metric without one
    gets max(absolute_margin, relative_margin × |baseline value|).
    Error rate: `alpha` is the false-block rate shared by `task_count` gated tasks (the session's, or 1 under per-task
    control) in proportion to their weights, so the task is tested at alpha × weight / total_weight
    (gate/alpha_split.py; docs/error-rates.md, "Error rates"). `total_weight` None: every task weighs 1 (the
    total is `task_count`; "tasks" in the file), as in baselines recorded before weights.
    """

    absolute_margin: float = 0.01
    relative_margin: float = 0.0
    alpha: float = 0.05
    task_count: int = 1
    metric_margins: Mapping[str, Margin] = field(default_factory=dict)
    weight: float = 1.0
    total_weight: float | None = None

    def __post_init__(self) -> None:
        if self.total_weight is None:
            object.__setattr__(self, "total_weight", float(self.task_count))

    def margin(self, metric: str) -> Margin:
        if metric in self.metric_margins:
            return self.metric_margins[metric]
        return Margin(self.absolute_margin, self.relative_margin)

    @property
    def task_alpha(self) -> float:
        return self.alpha * (self.weight / self.total_weight)  # w / W first: all of the weight is all of alpha


@dataclass(frozen=True)
class NoiseEntry:
    """How much one entry moved when the baseline's checkpoint was scored a second time (gate/noise_floor.py)."""

    metric: str
    category: str | None  # None: over all documents
    flip_rate: float  # share of the entry's documents whose value changed
    shift: float  # |delta| between the two scorings, in the entry's oriented units (as the gate reports delta)


@dataclass(frozen=True)
class NoiseFloor:
    """The pipeline's own noise, measured when the baseline was recorded under --noise-floor."""

    measured_with: str  # how the second scoring differed from the first ("batch size 1, plain path, ...")
    entries: tuple[NoiseEntry, ...]

    def entry(self, metric: str, category: str | None) -> NoiseEntry | None:
        return next((e for e in self.entries if e.metric == metric and e.category == category), None)


@dataclass(frozen=True)
class Recording:
    """An earlier recording of the task that some entry's reference still comes from: its per-document values (in
    its record's document order) and what recorded them."""

    id: str
    model: str
    created: str
    values: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Acceptance:
    """A regression accepted by name (--accept-regression): when, why, and the reference it lowered."""

    when: str
    why: str
    previous: float
    value: float


@dataclass(frozen=True)
class EntryAnchor:
    """Where one entry's reference comes from (gate/ratchet.py): the recording, and the entry's origin (its
    reference when it was first recorded, or when its anchors were last reset) that cumulative change is told from."""

    metric: str
    category: str | None
    recording: str
    origin: float
    origin_created: str
    accepted: Acceptance | None = None  # the acceptance that set this reference, if one did


@dataclass(frozen=True)
class Ratchet:
    """Per-entry references (docs/baselines.md, "Ratcheting references"): the id of the record's own recording,
    the earlier recordings still referenced, each entry's anchor, and why the anchors were last reset."""

    recording: str
    earlier: tuple[Recording, ...] = ()
    entries: tuple[EntryAnchor, ...] = ()
    reset: tuple[str, str] | None = None  # (when, why): a re-baseline that no anchor could carry over

    def anchor(self, metric: str, category: str | None) -> EntryAnchor | None:
        return next((a for a in self.entries if a.metric == metric and a.category == category), None)


@dataclass(frozen=True)
class BaselineRecord:
    """One task's scores as stored (or as the candidate run would store them)."""

    task: str
    suite: str
    baseline_name: str
    provenance: Provenance
    tolerance: Tolerance
    metrics: tuple[MetricInfo, ...]
    category_field: str | None
    overall: Mapping[str, Summary]
    categories: Mapping[str, Mapping[str, Summary]]
    doc_keys: tuple[str, ...]
    doc_ids: tuple[int, ...]
    doc_categories: tuple[str | None, ...]
    values: Mapping[str, np.ndarray]  # metric name → per-document values, in doc_keys order (per-document metrics)
    # A group's subgroups: category → the document categories (leaf tasks) it unites. A group metric that some of
    # its tasks do not score holds NaN (null in the file) for their documents.
    category_members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    noise_floor: NoiseFloor | None = None  # measured under --noise-floor; None in other records and older files
    # Each document's cluster (its task's `modelbench.gate.cluster`, None where its task declares none); empty when
    # no document has one. The candidate's: a baseline file does not store them (the gate pairs by document key).
    doc_clusters: tuple[str | None, ...] = ()
    ratchet: Ratchet | None = None  # per-entry anchors; None: every entry's reference is this record's own values

    def reference_values(self, metric: str, category: str | None) -> Mapping[str, np.ndarray]:
        """The per-document values an entry is compared with: those of the recording its reference came from."""
        anchor = None if self.ratchet is None else self.ratchet.anchor(metric, category)
        if anchor is None or anchor.recording == self.ratchet.recording:
            return self.values
        return next(r.values for r in self.ratchet.earlier if r.id == anchor.recording)

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics)

    @property
    def row_metrics(self) -> tuple[MetricInfo, ...]:
        """The metrics stored per document (a column each in `documents.rows`)."""
        return tuple(m for m in self.metrics if m.per_document)

    def metric(self, name: str) -> MetricInfo:
        return next(m for m in self.metrics if m.name == name)


# --------------------------------------------------------------------------- building from an evaluation


def _summary(summary: Any) -> Summary:
    return Summary(summary.value, summary.stderr, int(summary.n))


def _flag_summary(flags: np.ndarray) -> Summary:
    """The mean of 0/1 values with lm-eval's stderr, as metrics/aggregate.py's MetricSummary."""
    n = len(flags)
    if n == 0:
        return Summary(None, None, 0)
    return Summary(float(np.mean(flags)), float(np.std(flags, ddof=1) / np.sqrt(n)) if n > 1 else None, n)


def with_clusters(record: BaselineRecord, clusters: Sequence[str | None]) -> BaselineRecord:
    """`record` read back from its text, with the declared clusters of its documents that the text does not carry (a
    baseline file stores none: the candidate's clusters decide, compare.py); as it is where there are none."""
    return dataclasses.replace(record, doc_clusters=tuple(clusters)) if clusters else record


def record_from_evaluation(
    evaluation: Any, *, suite: str, baseline_name: str, provenance: Provenance, tolerance: Tolerance
) -> BaselineRecord:
    """The record a candidate run would store, from a TaskEvaluation (prepared documents + TaskScores)."""
    prepared, scores = evaluation.prepared, evaluation.scores
    documents = prepared.documents
    metrics = tuple(
        MetricInfo(
            m.name, m.direction.kind, m.direction.ideal, bool(m.binary),
            aggregate=getattr(m, "aggregate", None) is not None, per_document=m.per_document is not None,
            lists=m.per_document is not None and np.asarray(scores.per_document[m.name]).dtype == object,
        )
        for m in scores.metrics
    )
    values = {}
    for metric in metrics:
        if not metric.per_document:
            continue
        if metric.lists:
            values[metric.name] = scores.per_document[metric.name]
            continue
        array = np.asarray(scores.per_document[metric.name], dtype=float)
        values[metric.name] = np.rint(array) if metric.binary else array
    overall = {name: _summary(s) for name, s in scores.overall.items()}
    categories = {category: {name: _summary(s) for name, s in block.items()}
                  for category, block in scores.by_category.items()}
    flags = getattr(getattr(evaluation, "integrity", None), "invalid_flags", None)
    if flags is not None:  # gate/integrity.py: the share of answers no filter could parse, lower is better
        metrics += (MetricInfo(INVALID_OUTPUT, "lower", None, True),)
        values[INVALID_OUTPUT] = np.asarray(flags, dtype=float)
        overall[INVALID_OUTPUT] = _flag_summary(values[INVALID_OUTPUT])
        in_category = np.array([d.category for d in documents], dtype=object)
        for category, block in categories.items():
            block[INVALID_OUTPUT] = _flag_summary(values[INVALID_OUTPUT][in_category == category])
    return BaselineRecord(
        task=scores.task,
        suite=suite,
        baseline_name=baseline_name,
        provenance=provenance,
        tolerance=tolerance,
        metrics=metrics,
        category_field=prepared.config.category_field,
        overall=overall,
        categories=categories,
        doc_keys=tuple(d.key for d in documents),
        doc_ids=tuple(int(d.doc_id) for d in documents),
        doc_categories=tuple(d.category for d in documents),
        values=values,
        category_members=dict(getattr(prepared, "category_members", {})),
        doc_clusters=tuple(d.cluster for d in documents) if any(d.cluster is not None for d in documents) else (),
    )


# --------------------------------------------------------------------------- comparability


def comparability_problems(baseline: BaselineRecord, candidate: BaselineRecord) -> list[str]:
    """Why the stored baseline cannot be compared with the candidate run (empty when it can)."""
    problems = []
    if baseline.task != candidate.task:
        problems.append(f"task name changed ({baseline.task!r} → {candidate.task!r})")
    problems += provenance_problems(baseline.provenance, candidate.provenance)
    if baseline.metrics != candidate.metrics:
        old = ", ".join(f"{m.name}:{m.direction}" for m in baseline.metrics)
        new = ", ".join(f"{m.name}:{m.direction}" for m in candidate.metrics)
        problems.append(f"metrics changed ({old} → {new})")
    if baseline.category_field != candidate.category_field:
        problems.append(f"category field changed ({baseline.category_field!r} → {candidate.category_field!r})")
    if not problems:
        old_keys, new_keys = set(baseline.doc_keys), set(candidate.doc_keys)
        missing, extra = old_keys - new_keys, new_keys - old_keys
        if missing or extra:
            problems.append(
                f"documents differ: {len(missing)} of the baseline's {len(old_keys)} documents are not in this run "
                f"and {len(extra)} of this run's {len(new_keys)} are not in the baseline (prompts or answers changed)"
            )
    return problems


def rebaseline_problem(baseline: BaselineRecord, candidate: BaselineRecord) -> str | None:
    """The "re-baseline required" message when the two runs are not comparable, else None."""
    problems = comparability_problems(baseline, candidate)
    if not problems:
        return None
    return (
        "re-baseline required: " + "; ".join(problems) + ". The stored baseline was recorded under other settings, "
        "so comparing with it would report false regressions; review the change and re-record it with "
        "--snapshot-update"
    )
