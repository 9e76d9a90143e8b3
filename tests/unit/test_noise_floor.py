"""The noise floor (gate/noise_floor.py): flip rates and shifts from two scorings of one checkpoint, the warning rule,
and the baseline file's optional `noise_floor` block."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_modelbench.errors import BaselineError
from pytest_modelbench.gate.baseline import NoiseEntry, NoiseFloor
from pytest_modelbench.gate.baseline_file import checksum, dumps, parse
from pytest_modelbench.gate.noise_floor import (
    REASON_FLIPS,
    REASON_SHIFT,
    below_noise,
    changed,
    measure,
    warning_text,
)
from tests.fixtures.gate_records import make_record

CATS = ["a", "b", "a", "b", "a", "b"]


def _floor(first, second):
    floor, _ = measure(first, second, measured_with="batch size 1")
    return {(e.metric, e.category): e for e in floor.entries}


def test_binary_flip_rate_and_shift_per_entry():
    first = make_record({"acc": [1, 0, 1, 1, 0, 1]}, CATS)
    second = make_record({"acc": [1, 1, 1, 0, 1, 1]}, CATS)  # documents 1, 3 and 4 flipped
    entries = _floor(first, second)
    assert set(entries) == {("acc", None), ("acc", "a"), ("acc", "b")}
    assert entries[("acc", None)].flip_rate == pytest.approx(3 / 6)
    assert entries[("acc", "a")].flip_rate == pytest.approx(1 / 3)  # document 4 of 0, 2, 4
    assert entries[("acc", "b")].flip_rate == pytest.approx(2 / 3)  # documents 1 and 3 of 1, 3, 5
    # shift = |mean(second) - mean(first)|: 5/6 - 4/6 overall, 3/3 - 2/3 in a, 2/3 - 2/3 in b
    assert entries[("acc", None)].shift == pytest.approx(1 / 6)
    assert entries[("acc", "a")].shift == pytest.approx(1 / 3)
    assert entries[("acc", "b")].shift == pytest.approx(0.0)


def test_continuous_values_change_beyond_a_relative_tolerance_only():
    first = make_record({"likelihood_diff": [1.0, 2.0, 3.0, 4.0]})
    second = make_record({"likelihood_diff": [1.0, 2.0 + 1e-12, 3.5, 4.0]})  # 5e-13 relative: unchanged
    entry = _floor(first, second)[("likelihood_diff", None)]
    assert entry.flip_rate == pytest.approx(1 / 4)
    assert entry.shift == pytest.approx(0.5 / 4)  # lower is better: oriented delta is -0.125, its size stored


def test_ideal_point_shift_is_the_change_of_distance_and_derived_entries_are_measured():
    first = make_record({"pct_stereotype": [1, 1, 1, 0], "likelihood_diff": [2.0, 1.0, 3.0, 0.5]})
    second = make_record({"pct_stereotype": [1, 1, 0, 0], "likelihood_diff": [2.0, 1.0, 3.0, 0.7]})
    entries = _floor(first, second)
    # 0.75 → 0.5: distance from 0.5 went 0.25 → 0
    assert entries[("pct_stereotype", None)].shift == pytest.approx(0.25)
    assert entries[("pct_stereotype", None)].flip_rate == pytest.approx(1 / 4)
    assert entries[("likelihood_diff", None)].flip_rate == pytest.approx(1 / 4)
    # stereotype_preference (signed gap, derived): +3.0 → -3.0 on document 2, -0.5 → -0.7 on document 3
    derived = entries[("stereotype_preference", None)]
    assert derived.flip_rate == pytest.approx(2 / 4)
    assert derived.shift == pytest.approx(abs((-3.0 - 3.0) + (-0.7 + 0.5)) / 4)


def test_identical_scorings_have_no_noise_and_documents_pair_by_key():
    values = {"acc": [1, 0, 1, 1, 0, 1], "likelihood_diff": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]}
    first = make_record(values, CATS)
    entries = _floor(first, make_record(values, CATS))
    assert entries and all(e.flip_rate == 0 and e.shift == 0 for e in entries.values())
    # the same scoring with its documents listed in another order is still no noise
    order = [5, 4, 3, 2, 1, 0]
    shuffled = make_record({k: [v[i] for i in order] for k, v in values.items()}, [CATS[i] for i in order],
                           keys=[first.doc_keys[i] for i in order])
    assert all(e.flip_rate == 0 and e.shift == 0 for e in _floor(first, shuffled).values())


def test_changed_handles_missing_values_lists_and_statistics():
    nan = float("nan")
    np.testing.assert_array_equal(
        changed(np.array([nan, 1.0, nan, 2.0]), np.array([nan, 1.0, 2.0, nan]), binary=False),
        [False, False, True, True])
    np.testing.assert_array_equal(
        changed(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 2.0], [3.0, 4.5]]), binary=False), [False, True])
    lists = np.empty(3, dtype=object)
    lists[:] = [np.array([1.0, 0.0]), np.array([1.0]), np.array([0.0, 1.0])]
    other = np.empty(3, dtype=object)
    other[:] = [np.array([1.0, 0.0]), np.array([1.0, 1.0]), np.array([1.0, 1.0])]
    np.testing.assert_array_equal(changed(lists, other, binary=False), [False, True, True])
    np.testing.assert_array_equal(changed(np.array([0.0, 0.0]), np.array([0.0, 1e-300]), binary=False), [False, True])


def test_margin_below_the_shift_or_half_the_flip_rate_warns():
    floor = NoiseFloor("batch size 1", (
        NoiseEntry("acc", None, 0.10, 0.02), NoiseEntry("acc", "a", 0.06, 0.0), NoiseEntry("diff", None, 0.5, 0.0),
    ))
    entries = [
        SimpleNamespace(metric="acc", category=None, margin=0.01),  # below its shift
        SimpleNamespace(metric="acc", category="a", margin=0.02),  # shift 0, but 0.02 < 0.06 / 2
        SimpleNamespace(metric="diff", category=None, margin=0.01),  # flips, but not a 0/1 metric
        SimpleNamespace(metric="acc", category="b", margin=0.0),  # not in the floor
    ]
    found = below_noise(entries, floor, binary_metrics=["acc"])
    assert [(w.metric, w.category, w.reason) for w in found] == [("acc", None, REASON_SHIFT), ("acc", "a", REASON_FLIPS)]
    assert below_noise([SimpleNamespace(metric="acc", category=None, margin=0.05)], floor, ["acc"]) == []
    assert below_noise([SimpleNamespace(metric="acc", category="a", margin=0.03)], floor, ["acc"]) == []
    text = warning_text("probe/t", found, floor.measured_with)
    assert text.startswith("probe/t: 2 entries with a margin below the pipeline's own noise")
    assert "acc: margin 0.01 < measured shift 0.02" in text
    assert "acc [a]: margin 0.02 < half the flip rate 0.03" in text and "batch size 1" in text


def test_the_gates_margins_are_those_the_measurement_compares_against():
    first = make_record({"acc": [1, 0, 1, 1, 0, 1]}, CATS)
    second = make_record({"acc": [1, 1, 1, 0, 1, 1]}, CATS)
    floor, comparison = measure(first, second, measured_with="x")
    margins = {(e.metric, e.category): e.margin for e in comparison.entries}
    assert set(margins) == {(e.metric, e.category) for e in floor.entries}
    assert set(margins.values()) == {first.tolerance.absolute_margin}
    warned = {(w.metric, w.category) for w in below_noise(comparison.entries, floor, ["acc"])}
    # shifts 1/6, 1/3, 0 against a 0.01 margin; category b's flips (2 of 3) warn by the flip rule
    assert warned == {("acc", None), ("acc", "a"), ("acc", "b")}


# --------------------------------------------------------------------------- the baseline file's block


def _with_floor():
    record = make_record({"acc": [1, 0, 1, 1]}, ["a", "b", "a", "b"])
    floor = NoiseFloor("batch size 1, plain path (first scoring: batch size auto, fast path)",
                       (NoiseEntry("acc", None, 0.25, 0.25), NoiseEntry("acc", "a", 0.0, 0.0),
                        NoiseEntry("acc", "b", 0.5, 0.5)))
    return record, dataclasses.replace(record, noise_floor=floor)


def test_noise_floor_round_trips_inside_the_checksum(tmp_path):
    plain, record = _with_floor()
    text = dumps(record)
    assert parse(text, tmp_path / "x.json").noise_floor == record.noise_floor
    assert '{"metric": "acc", "category": "b", "flip_rate": 0.5, "shift": 0.5}' in text  # one line per entry
    # a file without the block (every baseline recorded without --noise-floor) reads as it always did
    old = dumps(plain)
    assert "noise_floor" not in old and parse(old, tmp_path / "x.json").noise_floor is None
    with pytest.raises(BaselineError, match="checksum mismatch"):
        parse(text.replace('"flip_rate": 0.5, "shift": 0.5', '"flip_rate": 0.5, "shift": 0.05'), tmp_path / "x.json")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda b: b.update(entries={"acc": 1}), "key 'noise_floor.entries' has the wrong type"),
        (lambda b: b.pop("measured_with"), "key 'noise_floor.measured_with' is missing"),
        (lambda b: b["entries"][0].update(shift=-0.1), "key 'noise_floor.entries[0].shift' must be >= 0"),
        (lambda b: b["entries"][1].update(flip_rate=1.5), "key 'noise_floor.entries[1].flip_rate' must lie between"),
        (lambda b: b["entries"][2].pop("category"), "key 'noise_floor.entries[2].category' is missing"),
        (lambda b: b["entries"][2].update(category=3), "key 'noise_floor.entries[2].category' must be a string"),
        (lambda b: b["entries"][0].update(metric=None), "key 'noise_floor.entries[0].metric' has the wrong type"),
        (lambda b: b["entries"].append(dict(b["entries"][0])), "entry acc [None] is listed twice"),
        (lambda b: b["entries"].append("acc"), "key 'noise_floor.entries[3]' must be an object"),
    ],
)
def test_malformed_noise_floor_block_names_the_file_and_key(tmp_path, edit, message):
    document = json.loads(dumps(_with_floor()[1]))
    edit(document["noise_floor"])
    document["checksum"] = checksum(document)  # resealed: the block itself must be checked, not only the checksum
    path = tmp_path / "baselines" / "default" / "suite" / "probe.json"
    with pytest.raises(BaselineError) as excinfo:
        parse(json.dumps(document), path)
    assert str(excinfo.value).startswith(f"{path}: invalid baseline: ")
    assert message in str(excinfo.value) and "--snapshot-update" in str(excinfo.value)


def test_a_noise_floor_block_that_is_not_an_object_is_invalid(tmp_path):
    document = json.loads(dumps(_with_floor()[1]))
    document["noise_floor"] = None
    document["checksum"] = checksum(document)
    with pytest.raises(BaselineError, match="key 'noise_floor' must be an object"):
        parse(json.dumps(document), tmp_path / "x.json")
