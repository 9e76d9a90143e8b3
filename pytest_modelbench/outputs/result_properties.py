"""A task's gate result as (name, value) pairs for `item.user_properties`, and back.

Every result travels this way: it reaches `--junitxml` as the test case's properties and, under pytest-xdist, the
controller inside each test report; a shard's run record stores it so too (outputs/run_record.py). The terminal
summary and the reports are rebuilt from what arrives.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from pytest_modelbench.gate.alpha_split import DEFAULT_WEIGHT
from pytest_modelbench.gate.result import GateResult

PROPERTY_PREFIX = "modelbench.gate"
DOCUMENTS_PROPERTY = "modelbench.gate-documents"  # the most changed documents (only with --html-report)
SCORES_PROPERTY = "modelbench.gate-scores"  # a task's scores when it was scored but not compared
INTEGRITY_PROPERTY = "modelbench.gate-integrity"  # what the run could not score or parse (gate/integrity.py)


def entry_key(entry_metric: str, category: str | None) -> str:
    return f"{PROPERTY_PREFIX}.{entry_metric}" + ("" if category is None else f"[{category}]")


def properties(result: GateResult) -> list[tuple[str, str]]:
    """(name, value) pairs for item.user_properties: one for the task, one per entry (JSON values)."""
    head = {
        "task": result.task, "status": result.status, "verdict": result.verdict, "baseline": result.baseline,
        "baseline_name": result.baseline_name, "note": result.note, "n_documents": result.n_documents,
        "alpha": result.alpha, "tasks": result.tasks, "weight": result.weight, "total_weight": result.total_weight,
        "baseline_provenance": result.baseline_provenance,
        "candidate_provenance": result.candidate_provenance, "baseline_ref": result.baseline_ref,
        "working_tree_differs": result.working_tree_differs, "pooling": result.pooling,
        "noise_warnings": result.noise_warnings, "noise_measured_with": result.noise_measured_with,
        "references": result.references,
    }
    pairs = [(PROPERTY_PREFIX, json.dumps(head, ensure_ascii=False))]
    for entry in result.entries:
        pairs.append((entry_key(entry["metric"], entry["category"]), json.dumps(entry, ensure_ascii=False)))
    if result.changed_documents:
        pairs.append((DOCUMENTS_PROPERTY, json.dumps(result.changed_documents, ensure_ascii=False)))
    if result.scores:
        pairs.append((SCORES_PROPERTY, json.dumps(result.scores, ensure_ascii=False)))
    if result.integrity is not None:
        pairs.append((INTEGRITY_PROPERTY, json.dumps(result.integrity, ensure_ascii=False)))
    return pairs


def result_from_properties(user_properties: Iterable[tuple[str, Any]], nodeid: str = "",
                           failed: bool = False) -> GateResult | None:
    """The result `properties` wrote; None when the properties hold none (the item was not gated)."""
    head, entries, documents, scores, integrity = None, [], [], [], None
    for name, value in user_properties:
        if name == PROPERTY_PREFIX:
            head = json.loads(value)
        elif name == INTEGRITY_PROPERTY:
            integrity = json.loads(value)
        elif name == DOCUMENTS_PROPERTY:
            documents = json.loads(value)
        elif name == SCORES_PROPERTY:
            scores = json.loads(value)
        elif isinstance(name, str) and name.startswith(PROPERTY_PREFIX + "."):
            entries.append(json.loads(value))
    if head is None:
        return None
    return GateResult(
        task=head["task"], status=head["status"], baseline=head["baseline"], baseline_name=head["baseline_name"],
        verdict=head.get("verdict"), note=head.get("note", ""), n_documents=head.get("n_documents", 0),
        entries=entries, nodeid=nodeid, failed=failed, alpha=head.get("alpha"), tasks=head.get("tasks", 1),
        weight=head.get("weight", DEFAULT_WEIGHT), total_weight=head.get("total_weight"),
        baseline_provenance=head.get("baseline_provenance"), candidate_provenance=head.get("candidate_provenance"),
        baseline_ref=head.get("baseline_ref"), working_tree_differs=head.get("working_tree_differs", False),
        changed_documents=documents, scores=scores, pooling=head.get("pooling", []),
        noise_warnings=head.get("noise_warnings", []), noise_measured_with=head.get("noise_measured_with", ""),
        references=head.get("references", []), integrity=integrity,
    )
