"""A compared task's gate result recomputed from evidence: the candidate's record (the BaselineRecord a shard scored,
as the baseline store writes it) against the merging project's own stored baseline, with the merging project's own
tolerance (margins, alpha, its share of alpha). Nothing the shard concluded is read: entries, p-values, verdicts and
the pooling statistics come out of `compare()`, the one process's comparison, so the result is the one process's.

A metric aggregated over the documents themselves (StereoSet's lms, ss and icat per target term, f1, mcc, the
perplexities over the texts, corpus BLEU) is recomputed from the documents the record carries beside the candidate
(`documents_json`), checked against the candidate record's document keys (hashes of each document's context,
continuations and gold); an aggregate the registry does not know by name (a task's own `!function` aggregation, a
group's aggregate over its tasks) cannot be recomputed here.

A problem that prevents the recomputation (a candidate record that does not parse or does not compare with the
baseline, other gate settings, documents that are not the candidate's, an aggregate this process does not know) is
an EvidenceProblem; the merge refuses the record with it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Sequence

from pytest_modelbench.gate.baseline import Tolerance, rebaseline_problem, with_clusters
from pytest_modelbench.gate.baseline_file import parse_or_problem
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.integrity import comparable_candidate, paired_baseline, why_invalid
from pytest_modelbench.gate.noise_floor import below_noise, binary_metrics
from pytest_modelbench.gate.provenance import stored_provenance
from pytest_modelbench.gate.result import GateResult
from pytest_modelbench.tasks.requests import DocumentRequests, key_digest


class EvidenceProblem(Exception):
    """Why a task's result cannot be recomputed from its evidence (the caller names the record and the task)."""


def documents_json(documents: Sequence[DocumentRequests]) -> list[list[Any]] | None:
    """The documents as a record carries them; None when a document's fields are not JSON (no evidence then)."""
    rows = [[d.doc_id, d.context, list(d.choices), list(d.continuations), d.gold, d.category, dict(d.doc)]
            for d in documents]
    try:
        json.dumps(rows, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return rows


def _documents(rows: Any, doc_keys: Sequence[str]) -> list[DocumentRequests]:
    try:
        documents = [DocumentRequests(int(doc_id), str(context), tuple(choices), tuple(continuations),
                                      tuple(gold) if isinstance(gold, list) else gold, category, dict(doc))
                     for doc_id, context, choices, continuations, gold, category, doc in rows]
    except (TypeError, ValueError):
        raise EvidenceProblem("its documents are malformed") from None
    # A key's #k is numbered over the task's documents, some of which the record may not hold (unscored)
    if [d.digest for d in documents] != [key_digest(key) for key in doc_keys]:
        raise EvidenceProblem("its documents are not the ones its candidate record scored")
    return documents


def rejudge(recorded: GateResult, candidate_text: str, stored_text: str | None, *, documents: Any,
            tolerance: Tolerance, baseline_display: str, baseline_name: str, baseline_ref: str | None,
            working_tree_differs: bool, clusters: Sequence[str | None] = ()) -> GateResult:
    """The result of the compared task `recorded` (its key, node id and changed documents are kept; the changed
    documents are display only) recomputed from `candidate_text` (and `documents`, the record's documents_json, for
    aggregated metrics, and `clusters`, the candidate's declared clusters recorded beside its text) and this project's
    baseline text."""
    candidate, problem = parse_or_problem(candidate_text)
    if candidate is None:
        raise EvidenceProblem(f"its candidate record is not valid: {problem}")
    candidate = with_clusters(candidate, clusters)
    if f"{candidate.suite}/{candidate.task}" != recorded.task:
        raise EvidenceProblem(f"its candidate record is of task {candidate.suite}/{candidate.task}")
    if stored_text is None:
        raise EvidenceProblem(f"this project has no baseline {baseline_display} to compare it with")
    baseline, problem = parse_or_problem(stored_text)
    if baseline is None:
        raise EvidenceProblem(f"this project's baseline {baseline_display} is not valid: {problem}")
    baseline = paired_baseline(baseline, candidate, (recorded.integrity or {}).get("unscored_keys", ()))
    candidate = comparable_candidate(baseline, candidate)
    problem = rebaseline_problem(baseline, candidate)
    if problem is not None:
        raise EvidenceProblem(f"it does not compare with this project's baseline {baseline_display}: "
                              f"{problem.split('. ')[0]}")
    if candidate.tolerance != tolerance:
        raise EvidenceProblem(f"it was judged under other gate settings than this project's "
                              f"({_difference(candidate.tolerance, tolerance)}): give the merge the shards' gate "
                              "options, in the checkout they ran")
    aggregated = [m.name for m in candidate.metrics if m.aggregate]
    if aggregated and documents is None:
        raise EvidenceProblem(f"metrics {', '.join(aggregated)} are aggregates over the documents, and the record "
                              "holds none: gate this task in one process")
    try:
        comparison = compare(baseline, candidate, tolerance,
                             _documents(documents, candidate.doc_keys) if aggregated else None)
    except ValueError as exc:  # an aggregate this process does not know by name
        raise EvidenceProblem(f"{exc}: gate this task in one process") from None
    result = GateResult.from_comparison(
        comparison, task=recorded.task, baseline=baseline_display, baseline_name=baseline_name,
        nodeid=recorded.nodeid, failed=bool(comparison.regressed), baseline_provenance=stored_provenance(stored_text),
        candidate_provenance=dataclasses.asdict(candidate.provenance), baseline_ref=baseline_ref,
        working_tree_differs=working_tree_differs, changed_documents=recorded.changed_documents,
        integrity=recorded.integrity,
    )
    result.note = why_invalid(comparison.regressed, recorded.integrity) or result.note
    if baseline.noise_floor is not None:
        warnings = below_noise(comparison.entries, baseline.noise_floor, binary_metrics(baseline))
        if warnings:
            result.noise_warnings = [w.as_json() for w in warnings]
            result.noise_measured_with = baseline.noise_floor.measured_with
    return result


def _difference(recorded: Tolerance, own: Tolerance) -> str:
    for name, label in (("alpha", "alpha"), ("task_count", "tasks"), ("weight", "weight"),
                        ("total_weight", "total_weight"), ("absolute_margin", "absolute_margin"),
                        ("relative_margin", "relative_margin")):
        if getattr(recorded, name) != getattr(own, name):
            return f"{label} {getattr(recorded, name)!r}, here {getattr(own, name)!r}"
    for metric in sorted(set(recorded.metric_margins) | set(own.metric_margins)):
        if recorded.margin(metric) != own.margin(metric):
            return f"margin of {metric} {recorded.margin(metric)}, here {own.margin(metric)}"
    return "margins"
