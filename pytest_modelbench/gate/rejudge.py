"""A compared task's gate result recomputed from evidence: the candidate's record (the BaselineRecord a shard scored,
as the baseline store writes it) against the merging project's own stored baseline, with the merging project's own
tolerance (margins, alpha, its share of alpha). Nothing the shard concluded is read: entries, p-values, verdicts and
the pooling statistics come out of `compare()`, the one process's comparison, so the result is the one process's.

A problem that prevents the recomputation (a candidate record that does not parse or does not compare with the
baseline, other gate settings, a metric that needs the documents themselves) is an EvidenceProblem; the merge
refuses the record with it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pytest_modelbench.gate.baseline import Tolerance, rebaseline_problem
from pytest_modelbench.gate.baseline_file import parse_or_problem
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.noise_floor import below_noise, binary_metrics
from pytest_modelbench.gate.report import GateResult


class EvidenceProblem(Exception):
    """Why a task's result cannot be recomputed from its evidence (the caller names the record and the task)."""


def rejudge(recorded: GateResult, candidate_text: str, stored_text: str | None, *, tolerance: Tolerance,
            baseline_display: str, baseline_name: str, baseline_ref: str | None,
            working_tree_differs: bool) -> GateResult:
    """The result of the compared task `recorded` (its key, node id and changed documents are kept; the changed
    documents are display only) recomputed from `candidate_text` and this project's baseline text."""
    candidate, problem = parse_or_problem(candidate_text)
    if candidate is None:
        raise EvidenceProblem(f"its candidate record is not valid: {problem}")
    if f"{candidate.suite}/{candidate.task}" != recorded.task:
        raise EvidenceProblem(f"its candidate record is of task {candidate.suite}/{candidate.task}")
    if stored_text is None:
        raise EvidenceProblem(f"this project has no baseline {baseline_display} to compare it with")
    baseline, problem = parse_or_problem(stored_text)
    if baseline is None:
        raise EvidenceProblem(f"this project's baseline {baseline_display} is not valid: {problem}")
    problem = rebaseline_problem(baseline, candidate)
    if problem is not None:
        raise EvidenceProblem(f"it does not compare with this project's baseline {baseline_display}: "
                              f"{problem.split('. ')[0]}")
    aggregated = [m.name for m in candidate.metrics if m.aggregate]
    if aggregated:
        raise EvidenceProblem(f"metrics {', '.join(aggregated)} are aggregates over the documents themselves, which "
                              "a record does not hold: gate this task in one process")
    if candidate.tolerance != tolerance:
        raise EvidenceProblem(f"it was judged under other gate settings than this project's "
                              f"({_difference(candidate.tolerance, tolerance)}): give the merge the shards' gate "
                              "options, in the checkout they ran")
    comparison = compare(baseline, candidate, tolerance)
    result = GateResult.from_comparison(
        comparison, task=recorded.task, baseline=baseline_display, baseline_name=baseline_name,
        nodeid=recorded.nodeid, failed=bool(comparison.regressed), baseline_provenance=_provenance(stored_text),
        candidate_provenance=dataclasses.asdict(candidate.provenance), baseline_ref=baseline_ref,
        working_tree_differs=working_tree_differs, changed_documents=recorded.changed_documents,
    )
    if baseline.noise_floor is not None:
        warnings = below_noise(comparison.entries, baseline.noise_floor, binary_metrics(baseline))
        if warnings:
            result.noise_warnings = [w.as_json() for w in warnings]
            result.noise_measured_with = baseline.noise_floor.measured_with
    return result


def _difference(recorded: Tolerance, own: Tolerance) -> str:
    for name in ("alpha", "tasks", "weight", "total_weight", "absolute_margin", "relative_margin"):
        if getattr(recorded, name) != getattr(own, name):
            return f"{name} {getattr(recorded, name)!r}, here {getattr(own, name)!r}"
    for metric in sorted(set(recorded.metric_margins) | set(own.metric_margins)):
        if recorded.margin(metric) != own.margin(metric):
            return f"margin of {metric} {recorded.margin(metric)}, here {own.margin(metric)}"
    return "margins"


def _provenance(stored_text: str) -> dict[str, Any] | None:
    provenance = json.loads(stored_text).get("provenance")
    return provenance if isinstance(provenance, dict) else None
