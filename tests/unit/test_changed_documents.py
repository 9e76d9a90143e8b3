"""The most changed documents list only documents whose values read differently at the report's precision."""

from __future__ import annotations

from pytest_modelbench.gate.changed_documents import most_changed
from pytest_modelbench.outputs.html_report import _changes
from pytest_modelbench.tasks.requests import DocumentRequests
from tests.fixtures.gate_records import make_record


def _documents(n: int) -> list[DocumentRequests]:
    return [DocumentRequests(i, f"Q{i}?", ("yes", "no"), (" yes", " no"), 0, None, {}) for i in range(n)]


def test_a_change_below_the_printed_precision_is_not_listed():
    baseline = make_record({"likelihood_diff": [3.5610, 2.0, 1.0]})
    candidate = make_record({"likelihood_diff": [3.56104, 2.5, 1.0]})  # document 0: 3.561 → 3.561 when printed
    found = most_changed(baseline, candidate, _documents(3))
    assert [row["doc_id"] for row in found] == [1]
    assert _changes(found[0]) == "likelihood_diff 2 → 2.5"
