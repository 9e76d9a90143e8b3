"""The most changed documents list only documents whose values read differently at the report's precision, against
the values each entry is compared with."""

from __future__ import annotations

import numpy as np

from pytest_modelbench.gate.baseline_file import dumps, parse
from pytest_modelbench.gate.changed_documents import most_changed
from pytest_modelbench.gate.judge import gate_texts
from pytest_modelbench.gate.ratchet import ratcheted
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


def test_documents_are_compared_with_their_entry_s_anchor():
    """Release 2 loses document 0 (category a: within the band, kept at release 1's anchor) and fixes 60 documents of
    category b (improved, raised). Release 3 equals release 2: against the re-recorded values nothing moved, against
    the anchors document 0 did, as the gate's entry for a says."""
    categories = ["a"] * 100 + ["b"] * 100
    first = np.zeros(200)
    first[:100] = 1
    second = first.copy()
    second[0], second[100:160] = 0, 1
    records = [make_record({"acc": values}, categories, created=f"2026-0{i}-01T00:00:00+00:00")
               for i, values in ((1, first), (2, second))]
    outcome = gate_texts(dumps(records[1]), dumps(records[0]))
    assert {e.label for e in outcome.comparison.improved} >= {"b"} and not outcome.comparison.regressed
    update = ratcheted(outcome.baseline, records[1], outcome.comparison, (), task="suite/probe", when="2026-02-01",
                       why="")
    stored = parse(dumps(update.record), "probe.json")
    documents = [DocumentRequests(i, f"Q{i}?", ("yes", "no"), (" yes", " no"), 0, c, {})
                 for i, c in enumerate(categories)]
    found = most_changed(stored, records[1], documents)
    assert [(row["doc_id"], row["category"]) for row in found] == [(0, "a")]
    assert _changes(found[0]) == "acc 1 → 0 <b>flipped</b>"
