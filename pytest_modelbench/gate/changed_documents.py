"""The documents that moved most between a stored baseline and the candidate, per category, with their text.

For a person reviewing a gate verdict (the HTML report): which prompts changed outcome. Documents are paired by
their hash, as the gate pairs them, and compared with the values of the recording their category's entry is anchored
to (gate/ratchet.py), as the gate compares them. A document ranks by how many of its 0/1 outcomes flipped (for a bias pair: its
preference), then by the summed absolute change of its continuous values (for bleu, chrf and ter: of the sentence
statistics they store per document, reported as lists; likewise a process_results list value); documents that did not
move are left out. A value "moved" when it reads differently at the precision the report prints (`format_value`, 4
significant digits): a change below it (3.5610 → 3.5612, or float noise between batch sizes) would show as
"3.561 → 3.561" and is not listed.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from pytest_modelbench.gate.baseline import BaselineRecord

PER_CATEGORY = 5
SIGNIFICANT_DIGITS = 4


def format_value(value: float | list[float]) -> str:
    """A document's value as reports print it; a list is a corpus score's sentence statistics (metrics/translation.py)."""
    if isinstance(value, list):
        return f"[{', '.join(format_value(item) for item in value)}]"
    return f"{value:.{SIGNIFICANT_DIGITS}g}"


def most_changed(
    baseline: BaselineRecord, candidate: BaselineRecord, documents: Sequence[Any], per_category: int = PER_CATEGORY
) -> list[dict[str, Any]]:
    """Up to `per_category` documents per category (None: a task without categories), most changed first.

    `documents`: the candidate's DocumentRequests, in the candidate record's order. Each result holds the doc id,
    category, the text (context, choices, gold) and, per metric that changed, its baseline and candidate values.
    """
    position = {key: i for i, key in enumerate(baseline.doc_keys)}
    ranked: dict[str | None, list[tuple[tuple[float, float], dict[str, Any]]]] = {}
    for i, (key, document) in enumerate(zip(candidate.doc_keys, documents)):
        j = position.get(key)
        if j is None:
            continue
        changes, flips, shift = {}, 0.0, 0.0
        category = candidate.doc_categories[i]
        for metric in candidate.row_metrics:
            reference = baseline.reference_values(metric.name, category)  # the entry's anchor (gate/ratchet.py)
            before, after = reference[metric.name][j], candidate.values[metric.name][i]
            if format_value(before.tolist()) == format_value(after.tolist()):
                continue
            changes[metric.name] = {"baseline": before.tolist(), "candidate": after.tolist(), "flipped": metric.binary}
            if metric.binary:
                flips += 1
            elif np.shape(after) == np.shape(before):
                shift += float(np.sum(np.abs(after - before)))
            else:  # a list value (IFEval's per-instruction outcomes) of another length: changed whole
                shift += float(np.sum(np.abs(after)) + np.sum(np.abs(before)))
        if changes:
            ranked.setdefault(category, []).append(((flips, shift), _described(document, changes)))
    found = []
    for category in sorted(ranked, key=lambda c: (c is not None, c or "")):
        rows = sorted(ranked[category], key=lambda pair: pair[0], reverse=True)[:per_category]
        found += [row for _, row in rows]
    return found


def _described(document: Any, changes: dict[str, Any]) -> dict[str, Any]:
    gold = list(document.gold) if isinstance(document.gold, tuple) else document.gold  # an index, or a reference text
    return {
        "doc_id": int(document.doc_id), "category": document.category, "context": document.context,
        "choices": list(document.choices), "gold": gold, "changes": changes,
    }
