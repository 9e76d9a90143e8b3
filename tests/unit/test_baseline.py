"""Baseline records: building, the JSON layout, validation that names the file, comparability."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_modelbench.errors import BaselineError
from pytest_modelbench.gate.baseline import Tolerance, rebaseline_problem, record_from_evaluation
from pytest_modelbench.gate.baseline_file import FORMAT, checksum, dumps, parse
from pytest_modelbench.metrics.registry import Margin
from pytest_modelbench.tasks.requests import DocumentRequests, document_hash, numbered
from tests.fixtures.gate_records import ACC, DIFF, fake_evaluation, make_record, provenance

DOCS = [
    ("Q: one?", ("yes", "no"), 0, "alpha"),
    ("Q: two?", ("yes", "no"), 1, "beta"),
    ("Q: one?", ("yes", "no"), 0, "alpha"),  # an exact repeat of the first document
    ("Q: four?", ("red", "blue"), 1, "beta"),
]
LLS = [[-1.0, -2.0], [-1.0, -2.0], [-1.0, -2.0], [-3.0, -0.5]]


def test_document_hash_is_stable_and_repeats_are_numbered():
    h = document_hash("Q: one?", (" yes", " no"), 0)
    assert h == document_hash("Q: one?", (" yes", " no"), 0)
    assert len(h) == 16 and int(h, 16) >= 0
    assert h != document_hash("Q: one?", (" yes", " no"), 1)  # the gold is part of what is scored
    assert h != document_hash("Q: one?", (" no", " yes"), 0)
    documents = [DocumentRequests(i, context, (), (), "gold", None, {}) for i, context in enumerate("abaa")]
    a, b = (documents[i].digest for i in (0, 1))
    assert [d.key for d in numbered(documents)] == [a, b, f"{a}#2", f"{a}#3"]


def test_record_from_evaluation_holds_scores_outcomes_and_provenance():
    evaluation = fake_evaluation("demo", DOCS, LLS, ("acc", "likelihood_diff"))
    record = record_from_evaluation(
        evaluation, suite="demo", baseline_name="release", provenance=provenance(), tolerance=Tolerance(0.02, 0.0, 0.05)
    )
    assert record.task == "demo" and record.category_field == "kind"
    assert record.doc_keys[2] == record.doc_keys[0] + "#2"
    assert record.doc_categories == ("alpha", "beta", "alpha", "beta")
    np.testing.assert_array_equal(record.values["acc"], [1, 0, 1, 1])
    np.testing.assert_allclose(record.values["likelihood_diff"], [1.0, 1.0, 1.0, 2.5])
    assert record.overall["acc"].value == pytest.approx(0.75) and record.overall["acc"].n == 4
    assert record.categories["beta"]["acc"].value == pytest.approx(0.5)
    assert [m.name for m in record.metrics] == ["acc", "likelihood_diff"]
    assert record.metric("likelihood_diff").direction == "lower"


def test_round_trip_and_readable_layout(tmp_path):
    record = make_record({"acc": [1, 0, 1], "likelihood_diff": [0.5, 1.25, 3.0]}, ["a", "b", "a"])
    text = dumps(record)
    parsed = parse(text, tmp_path / "x.json")
    assert parsed.doc_keys == record.doc_keys and parsed.doc_categories == record.doc_categories
    np.testing.assert_array_equal(parsed.values["acc"], record.values["acc"])
    np.testing.assert_array_equal(parsed.values["likelihood_diff"], record.values["likelihood_diff"])
    assert parsed.provenance == record.provenance and parsed.metrics == record.metrics
    assert parsed.overall == record.overall and parsed.categories == record.categories
    assert dumps(parsed) == text  # stable: parse → dump gives back the same bytes

    document = json.loads(text)
    assert document["format"] == FORMAT and document["checksum"].startswith("sha256:")
    assert document["documents"]["columns"] == ["doc_id", "category", "acc", "likelihood_diff"]
    lines = text.splitlines()
    row_lines = [line for line in lines if line.strip().startswith(tuple(f'"{k}"' for k in record.doc_keys))]
    assert len(row_lines) == 3 and row_lines[0].strip() == f'"{record.doc_keys[0]}": [0, "a", 1, 0.5],'
    assert '"acc": {"direction": "higher", "ideal": null, "binary": true},' in text


def test_gate_settings_round_trip_and_older_gate_blocks_still_load(tmp_path):
    tolerance = Tolerance(0.01, 0.0, 0.05, task_count=21, metric_margins={"likelihood_diff": Margin(relative=0.1)})
    record = make_record({"acc": [1, 0, 1], "likelihood_diff": [0.5, 1.25, 3.0]}, tolerance=tolerance)
    text = dumps(record)
    assert parse(text, "x.json").tolerance == tolerance
    assert json.loads(text)["gate"]["metric_margins"] == {"likelihood_diff": {"absolute": 0.0, "relative": 0.1}}
    # a baseline written before "tasks" and "metric_margins" existed (baselines/default/bias/ are)
    document = json.loads(text)
    document["gate"] = {"absolute_margin": 0.01, "relative_margin": 0.0, "alpha": 0.05}
    older = parse(_resealed(document), "old.json").tolerance
    assert older == Tolerance(0.01, 0.0, 0.05) and older.task_count == 1 and older.margin("acc") == Margin(0.01, 0.0)


def test_one_flipped_outcome_is_a_small_diff():
    before = dumps(make_record({"acc": [1, 0, 1, 1]}, ["a", "b", "a", "b"]))
    flipped = make_record({"acc": [1, 1, 1, 1]}, ["a", "b", "a", "b"])
    after = dumps(flipped)
    changed = [(x, y) for x, y in zip(before.splitlines(), after.splitlines()) if x != y]
    # the row, the overall summary, the category summary and the checksum
    assert len(changed) == 4
    assert any(f'"{flipped.doc_keys[1]}": [1, "b", 1]' in y for _, y in changed)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t[: len(t) // 2], "corrupt baseline, not valid JSON"),
        (lambda t: "", "corrupt baseline, not valid JSON"),
        (lambda t: t.replace('"value": 0.75', '"value": 0.95', 1), "checksum mismatch: the file was edited by hand"),
        (lambda t: t.replace('[0, "a", 1]', '[0, "a", 0]', 1), "checksum mismatch"),
        (lambda t: t.replace(FORMAT, "pytest-modelbench-baseline/0"), "unsupported format"),
        (lambda t: "[1, 2]", "must hold a JSON object"),
    ],
)
def test_corrupt_or_edited_baseline_names_the_file(tmp_path, mutate, message):
    text = dumps(make_record({"acc": [1, 0, 1, 1]}, ["a", "b", "a", "b"]))
    path = tmp_path / "baselines" / "default" / "suite" / "probe.json"
    with pytest.raises(BaselineError) as excinfo:
        parse(mutate(text), path)
    assert str(excinfo.value).startswith(f"{path}: ")
    assert message in str(excinfo.value)
    assert "--snapshot-update" in str(excinfo.value)


def _resealed(document: dict) -> str:
    document["checksum"] = checksum(document)
    return json.dumps(document)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["scores"]["overall"]["acc"].update(value=0.9), "does not match the per-document outcomes"),
        (lambda d: d["scores"]["overall"]["acc"].update(n=7), "there are 4 documents"),
        (lambda d: d["documents"]["rows"].update({"0000000000000000": [0, "a", 2]}), "'acc' is binary, found 2"),
        (lambda d: d["documents"]["rows"].update({"not-a-hash": [0, "a", 1]}), "is not a document hash"),
        (lambda d: d["documents"].update(columns=["doc_id", "acc"]), "documents.columns"),
        (lambda d: d["metrics"]["acc"].update(direction="sideways"), "must be higher, lower or ideal"),
        (lambda d: d["provenance"].pop("data_fingerprint"), "'provenance.data_fingerprint' is missing"),
        (lambda d: d["gate"].update(alpha="x"), "'gate.alpha' has the wrong type"),
        (lambda d: d["gate"].update(tasks=0), "'gate.tasks' must be an integer >= 1"),
        (lambda d: d["gate"].update(metric_margins={"acc": {"absolute": "x"}}), "'gate.metric_margins.acc.absolute'"),
    ],
)
def test_structural_problems_are_explained_even_with_a_valid_checksum(edit, message):
    document = json.loads(dumps(make_record({"acc": [1, 0, 1, 1]}, ["a", "b", "a", "b"])))
    edit(document)
    with pytest.raises(BaselineError, match="invalid baseline") as excinfo:
        parse(_resealed(document), "b.json")
    assert message in str(excinfo.value)


def test_comparability_names_what_changed():
    base = make_record({"acc": [1, 0, 1]})
    assert rebaseline_problem(base, make_record({"acc": [0, 0, 0]})) is None
    # model, weights, dtype, batch size, device, packages and date may all differ: that is what the gate compares
    other_run = make_record(
        {"acc": [1, 1, 1]}, model="org/ckpt-v2", model_fingerprint="hub:org/ckpt-v2@def", dtype="bfloat16",
        batch_size=8, device="cuda", packages={"torch": "9"}, created="2027-01-01",
    )
    assert rebaseline_problem(base, other_run) is None
    for change, label in [
        ({"task_config_hash": "cfg2"}, "task config changed ('cfg1' → 'cfg2')"),
        ({"data_fingerprint": "data2"}, "dataset changed"),
        ({"limit": 100}, "limit changed (None → 100)"),
        ({"num_fewshot": 5}, "num_fewshot changed (0 → 5)"),
        ({"scoring_protocol": "masked"}, "scoring protocol changed"),
    ]:
        problem = rebaseline_problem(base, make_record({"acc": [1, 0, 1]}, **change))
        assert problem.startswith("re-baseline required: ") and label in problem and "--snapshot-update" in problem
    problem = rebaseline_problem(base, make_record({"acc": [1, 0, 1]}, metrics=[ACC], keys=["a" * 16, "b" * 16, "c" * 16]))
    assert "documents differ: 3 of the baseline's 3 documents are not in this run" in problem
    assert "metrics changed" in rebaseline_problem(base, make_record({"acc": [1, 0, 1], "likelihood_diff": [1, 1, 1]}))
    assert "metrics changed" in rebaseline_problem(
        make_record({"likelihood_diff": [1, 2, 3]}),
        make_record({"likelihood_diff": [1, 2, 3]}, metrics=[DIFF.__class__("likelihood_diff", "higher", None, False)]),
    )
