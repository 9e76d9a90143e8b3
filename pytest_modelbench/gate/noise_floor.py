"""The pipeline's own noise: the baseline's checkpoint scored twice, under two scoring configurations, compared entry
by entry with the gate's own comparison; and the rule that warns when a margin is below that noise.

Under `--snapshot-update --noise-floor` each task is scored a second time by a second backend that differs in the
scoring configuration only (run/runner.py, `BenchRunner.noise_runner`: the other batch size, the other scoring path of a
local causal LM, no score cache). Both scorings are records of the same checkpoint on the same documents, so
`compare(first, second)` yields exactly the gate's entries (every metric overall and per category, derived ones
included) and, per entry:

  shift      |delta| between the two scorings, in the entry's oriented units (as the gate reports delta: for an
             ideal-point metric the change of the distance from the ideal)
  flip_rate  the share of the entry's documents whose value changed: a 0/1 outcome that flipped, a continuous value
             that moved by more than CHANGED_REL_TOL of its size, a list value (corpus statistics, IFEval's
             per-instruction outcomes) with any item so moved. A metric without per-document values of its own
             (StereoSet's icat) counts a document as changed when any of the task's per-document values changed;
             a derived metric (stereotype_preference) compares its derived per-document values.

Warning rule (`below_noise`), at gate time against the stored floor, and at recording time against the new one: an
entry warns when
  - its margin is below its shift: on the baseline's own checkpoint the pipeline moved it by more than the margin
    allows, so a "regression" of that size may be scoring noise; or
  - it is a 0/1 metric with flipped documents and its margin is below half its flip rate: flips that cancelled in this
    measurement need not cancel in the next, and had 3 in 4 of them gone one way the entry would have moved by half
    the flip rate.
Warnings never change a verdict: the margin is the release policy; the warning says it is tighter than the pipeline
can measure.

Pure functions over records and entries; no pytest here (the pytest layer turns `warning_text` into a warning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from pytest_modelbench.gate.baseline import BaselineRecord, NoiseEntry, NoiseFloor
from pytest_modelbench.gate.compare import TaskComparison, compare, entry_groups
from pytest_modelbench.metrics.evidence import derived_metrics

CHANGED_REL_TOL = 1e-9  # a continuous value "changed" when it moved by more than this share of its size
REASON_SHIFT = "shift"
REASON_FLIPS = "flips"


class NoiseFloorWarning(UserWarning):
    """A task's margins are below the noise its own scoring pipeline produces (measured with --noise-floor)."""


def changed(first: np.ndarray, second: np.ndarray, *, binary: bool) -> np.ndarray:
    """Per document, whether the value differs between two scorings (see the module docstring). A document without a
    value in both (NaN: a group metric its task does not score) is unchanged; with a value in one only, changed."""
    if first.dtype == object or second.dtype == object:  # one float array per document, of its own length
        return np.array([_lists_differ(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
                         for a, b in zip(first, second)], dtype=bool)
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if binary:
        moved = a != b
    else:
        with np.errstate(invalid="ignore"):
            moved = np.abs(a - b) > CHANGED_REL_TOL * np.maximum(np.abs(a), np.abs(b))
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    moved = (moved & ~nan_a & ~nan_b) | (nan_a != nan_b)
    return moved.any(axis=tuple(range(1, moved.ndim))) if moved.ndim > 1 else moved


def _lists_differ(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape != b.shape or bool(changed(a, b, binary=False).any())


def _aligned(first: BaselineRecord, second: BaselineRecord) -> dict[str, np.ndarray]:
    """The second record's per-document values in the first's document order (documents are paired by key)."""
    position = {key: i for i, key in enumerate(second.doc_keys)}
    if set(position) != set(first.doc_keys) or len(position) != len(first.doc_keys):
        raise ValueError("the two scorings hold different documents; a noise floor compares one task's documents")
    order = np.array([position[key] for key in first.doc_keys], dtype=int)
    return {name: np.asarray(values)[order] for name, values in second.values.items()}


def document_changes(first: BaselineRecord, second: BaselineRecord) -> tuple[dict[str, np.ndarray],
                                                                              dict[str, np.ndarray]]:
    """Per metric of the entries (derived ones included), in the first record's document order: (whether each
    document changed, whether it counts: has a value in either scoring)."""
    second_values = _aligned(first, second)
    n = len(first.doc_keys)
    changes: dict[str, np.ndarray] = {}
    counted: dict[str, np.ndarray] = {}
    for metric in first.row_metrics:
        a, b = np.asarray(first.values[metric.name]), second_values[metric.name]
        changes[metric.name] = changed(a, b, binary=metric.binary)
        if a.dtype != object and a.ndim == 1:
            counted[metric.name] = ~(np.isnan(a.astype(float)) & np.isnan(b.astype(float)))
        else:
            counted[metric.name] = np.ones(n, dtype=bool)
    any_row = np.zeros(n, dtype=bool)
    for values in changes.values():
        any_row |= values
    for metric in first.metrics:
        if not metric.per_document:  # computed from the task's per-document values (icat from lms and ss)
            changes[metric.name], counted[metric.name] = any_row, np.ones(n, dtype=bool)
    for derived in derived_metrics(first.metric_names):
        changes[derived.name] = changed(derived.values(first.values), derived.values(second_values), binary=False)
        counted[derived.name] = np.ones(n, dtype=bool)
    return changes, counted


def measure(first: BaselineRecord, second: BaselineRecord, *, measured_with: str,
            documents: Sequence[Any] | None = None,
            aggregates: Mapping[str, Callable[..., float | None]] | None = None) -> tuple[NoiseFloor, TaskComparison]:
    """The noise floor of `first` (the record to store) from `second` (the same checkpoint scored again), and the
    comparison it comes from (its entries carry the margins of `first`'s tolerance, at `first`'s values).
    `documents` and `aggregates` as for `compare` (needed by metrics with their own aggregate)."""
    comparison = compare(first, second, first.tolerance, documents, aggregates)
    changes, counted = document_changes(first, second)
    groups = dict(entry_groups(first))
    entries = []
    for entry in comparison.entries:
        members = groups[entry.category] & counted[entry.metric]
        total = int(np.count_nonzero(members))
        flips = int(np.count_nonzero(changes[entry.metric] & members))
        entries.append(NoiseEntry(entry.metric, entry.category, flips / total if total else 0.0, abs(float(entry.delta))))
    return NoiseFloor(measured_with, tuple(entries)), comparison


@dataclass(frozen=True)
class NoiseWarning:
    """An entry whose margin is below the pipeline's measured noise."""

    metric: str
    category: str | None
    margin: float
    shift: float
    flip_rate: float
    reason: str  # REASON_SHIFT | REASON_FLIPS

    @property
    def label(self) -> str:
        return self.metric + ("" if self.category is None else f" [{self.category}]")

    def describe(self) -> str:
        if self.reason == REASON_SHIFT:
            return f"{self.label}: margin {self.margin:.3g} < measured shift {self.shift:.3g}"
        return (f"{self.label}: margin {self.margin:.3g} < half the flip rate {self.flip_rate / 2:.3g} "
                f"({self.flip_rate:.3g} of its documents flipped; measured shift {self.shift:.3g})")

    def as_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "category": self.category, "margin": self.margin, "shift": self.shift,
                "flip_rate": self.flip_rate, "reason": self.reason}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "NoiseWarning":
        return cls(raw["metric"], raw["category"], raw["margin"], raw["shift"], raw["flip_rate"], raw["reason"])


def below_noise(entries: Iterable[Any], floor: NoiseFloor, binary_metrics: Iterable[str]) -> list[NoiseWarning]:
    """The entries (anything with metric, category and margin: the gate's `Entry`) whose margin is below the noise
    floor's shift, or, for a 0/1 metric (`binary_metrics`), below half its flip rate. Entries the floor does not
    list (a category new since it was measured) are not judged."""
    binary = set(binary_metrics)
    found = []
    for entry in entries:
        noise = floor.entry(entry.metric, entry.category)
        if noise is None:
            continue
        margin = float(entry.margin)
        if margin < noise.shift:
            reason = REASON_SHIFT
        elif entry.metric in binary and noise.flip_rate > 0 and margin < noise.flip_rate / 2:
            reason = REASON_FLIPS
        else:
            continue
        found.append(NoiseWarning(entry.metric, entry.category, margin, noise.shift, noise.flip_rate, reason))
    return found


def binary_metrics(record: BaselineRecord) -> list[str]:
    """The record's 0/1 metrics (a derived metric is continuous)."""
    return [m.name for m in record.metrics if m.binary]


def warning_text(task: str, warnings: Sequence[NoiseWarning], measured_with: str) -> str:
    """One line for a task's entries below the noise floor (the pytest warning, and the gate summary's note)."""
    count = f"{len(warnings)} entr{'y' if len(warnings) == 1 else 'ies'}"
    return (f"{task}: {count} with a margin below the pipeline's own noise ({'; '.join(w.describe() for w in warnings)})"
            f"; noise measured by scoring the baseline's checkpoint again with {measured_with}. The gate cannot tell "
            "a change that small from scoring noise: widen the margin, or treat such a regression with care")
