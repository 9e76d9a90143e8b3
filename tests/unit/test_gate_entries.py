"""The gate compares every metric it stored, or says why not: no entry is ever left out without a word."""

from __future__ import annotations

import pytest

from pytest_modelbench.gate.baseline import Tolerance, record_from_evaluation
from pytest_modelbench.gate.baseline_file import dumps
from pytest_modelbench.gate.compare import compare
from pytest_modelbench.gate.judge import gate_texts
from pytest_modelbench.pytest_plugin.syrupy_extension import BaselineExtension, BaselineUpdateExtension
from tests.fixtures.gate_records import provenance
from tests.unit.test_compare import _stereoset

TOL = Tolerance(absolute_margin=0.01, relative_margin=0.0, alpha=0.05)


def record(evaluation):
    return record_from_evaluation(evaluation, suite="bias", baseline_name="default", provenance=provenance(),
                                  tolerance=TOL)


@pytest.fixture(scope="module")
def stereoset_texts():
    """A baseline, a candidate heavily stereotyped on gender (ss and icat regress), and the candidate's documents."""
    base, worse = _stereoset("stereoset", 60, 0.5, seed=1), _stereoset("stereoset", 60, {"gender": 0.95}, seed=1)
    return dumps(record(base)), dumps(record(worse)), worse.prepared.documents


def test_aggregate_metrics_are_never_dropped_from_a_comparison(stereoset_texts):
    stored, candidate, _ = stereoset_texts
    from pytest_modelbench.gate.baseline_file import parse

    with pytest.raises(ValueError, match="metric 'lms' is an aggregate: compare\\(\\) needs the candidate's documents"):
        compare(parse(stored, "b.json"), parse(candidate, "c.json"), TOL)
    outcome = gate_texts(candidate, stored)  # texts only, as syrupy has them
    assert outcome.comparison is None
    assert outcome.problem == ("metrics lms, ss, icat are aggregates over the task's documents and can only be "
                               "compared in the run that scored them")


def test_syrupy_sees_the_gates_outcome_with_every_aggregate_entry(stereoset_texts):
    stored, candidate, documents = stereoset_texts
    decided = gate_texts(candidate, stored, documents)
    regressed = {(e.metric, e.category) for e in decided.comparison.regressed}
    assert {("ss", "gender"), ("icat", "gender")} <= regressed
    for extension in (BaselineExtension(), BaselineUpdateExtension()):
        # without the gate's outcome the regression was invisible to syrupy: every entry was dropped, so it "held"
        assert not extension.matches(serialized_data=candidate, snapshot_data=stored)
        extension.decided = (candidate, stored, decided)
        assert not extension.matches(serialized_data=candidate, snapshot_data=stored)
        assert any("ss" in line and "gender" in line and "regressed" in line
                   for line in extension.diff_lines(candidate, stored))


def test_syrupy_matches_a_stereoset_baseline_that_still_holds(stereoset_texts):
    stored, _, _ = stereoset_texts
    same = _stereoset("stereoset", 60, 0.5, seed=1)
    candidate = dumps(record(same))
    extension = BaselineUpdateExtension()
    extension.decided = (candidate, stored, gate_texts(candidate, stored, same.prepared.documents))
    assert extension.matches(serialized_data=candidate, snapshot_data=stored)
    extension.decided = ("another candidate", stored, extension.decided[2])  # an outcome for other texts is not used
    assert not extension.matches(serialized_data=candidate, snapshot_data=stored)
