"""Baselines ratchet per entry (gate/ratchet.py): the three-release scenario of issue 43, on hand-built records.

Task of 900 documents, categories c0, c1, c2 of 300, margin 3 points. Each release fixes 30 answers in c1 (+10
points) and loses 12 in each of c0 and c2 (-4 points, inside the margin's noise). Re-recording the whole file on each
update lets c0 and c2 drift down by 4 points a release without a blocked run; ratcheted, they keep their anchors and
the third release is caught against them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from pytest_modelbench.gate.baseline_file import FORMAT, FORMAT_RATCHET, dumps, parse
from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.judge import gate_texts
from pytest_modelbench.gate.policy import GateOptionError, checked_policy
from pytest_modelbench.gate.ratchet import AcceptedRegression, parse_acceptance, ratcheted, reset_record
from pytest_modelbench.gate.verdict import Verdict
from tests.fixtures.gate_records import make_record

TOL = Tolerance(absolute_margin=0.03, alpha=0.05)
CATEGORIES = ["c0"] * 300 + ["c1"] * 300 + ["c2"] * 300
TASK = "suite/probe"


def release(number: int):
    """Release 1 is the first baseline; each later one: 30 more right in c1, 12 more wrong in each of c0 and c2."""
    acc = np.zeros(900)
    lost, fixed = 12 * (number - 1), 30 * (number - 1)
    acc[0:206 - lost] = 1  # c0: 206 right at release 1 (0.687)
    acc[300:450 + fixed] = 1  # c1: 150 right (0.5)
    acc[600:807 - lost] = 1  # c2: 207 right (0.690)
    return make_record({"acc": acc}, CATEGORIES, tolerance=TOL, model=f"org/ckpt-v{number}",
                       created=f"2026-0{number}-01T00:00:00+00:00")


def verdicts(outcome):
    return {e.label: e.verdict for e in outcome.comparison.entries}


def updated(stored, candidate, accepted=(), why=""):
    """What --snapshot-update writes: the stored file's text gated, then ratcheted, through the file format."""
    outcome = gate_texts(dumps(candidate), dumps(stored))
    update = ratcheted(outcome.baseline, candidate, outcome.comparison, accepted, task=TASK,
                       when=candidate.provenance.created, why=why)
    return outcome, update


def test_three_releases_ratchet_c1_up_and_keep_c0_c2_at_their_anchors():
    first, second, third = release(1), release(2), release(3)
    outcome, update = updated(first, second)
    # release 2: c1 improved; c0 and c2 lost 4 points, within reach of noise at this margin: not regressed
    assert verdicts(outcome)["c1"] is Verdict.IMPROVED
    assert verdicts(outcome)["c0"] is not Verdict.REGRESSED and verdicts(outcome)["c2"] is not Verdict.REGRESSED
    stored = parse(dumps(update.record), "ratchet.json")  # the file as written and read back
    assert stored.ratchet is not None and dumps(stored).count(FORMAT_RATCHET) == 1
    references = {e.label: e.baseline for e in gate_texts(dumps(third), dumps(stored)).comparison.entries}
    assert references["c1"] == pytest.approx(0.6)  # raised to release 2's value
    assert references["c0"] == pytest.approx(206 / 300) and references["c2"] == pytest.approx(207 / 300)  # anchors
    assert references["(all)"] == pytest.approx(first.overall["acc"].value)  # in band: kept too

    # release 3 against the ratcheted file: c0 and c2 are 8 points below their anchors, and named
    outcome = gate_texts(dumps(third), dumps(stored))
    assert {e.label for e in outcome.comparison.regressed} == {"c0", "c2"}
    # ... though against release 2's values (what a whole-file re-record leaves) they are not regressed
    drifted = gate_texts(dumps(third), dumps(second))
    assert not {"c0", "c2"} & {e.label for e in drifted.comparison.regressed}

    # an update without acceptance is blocked and writes nothing
    blocked = ratcheted(outcome.baseline, third, outcome.comparison, (), task=TASK, when="now", why="")
    assert blocked.record is None and {e.label for e in blocked.blocked} == {"c0", "c2"}


def test_an_accepted_regression_lowers_exactly_the_entries_it_names():
    first, second, third = release(1), release(2), release(3)
    stored = parse(dumps(updated(first, second)[1].record), "ratchet.json")
    accepted = [parse_acceptance(f"{TASK}:acc:c0")]
    _, update = updated(stored, third, accepted, why="c0 traded for c1")
    assert update.record is None and [e.label for e in update.blocked] == ["c2"]  # c2 is not accepted

    accepted.append(parse_acceptance(f"{TASK}:acc:c2"))
    _, update = updated(stored, third, accepted, why="c0 and c2 traded for c1")
    written = parse(dumps(update.record), "ratchet.json")
    anchors = {a.category: a for a in written.ratchet.entries}
    assert anchors["c0"].accepted.why == "c0 and c2 traded for c1"
    assert anchors["c0"].accepted.previous == pytest.approx(206 / 300)
    assert anchors["c0"].accepted.value == pytest.approx(182 / 300)
    assert anchors["c1"].accepted is None and anchors[None].accepted is None
    references = {e.label: e.baseline for e in gate_texts(dumps(third), dumps(written)).comparison.entries}
    assert references["c0"] == pytest.approx(182 / 300) and references["c2"] == pytest.approx(183 / 300)
    assert references["c1"] == pytest.approx(0.7)  # raised again
    assert references["(all)"] == pytest.approx(first.overall["acc"].value)  # not named: still release 1's
    # only recordings still referenced are kept: release 1's (the overall entry), none of release 2's
    assert [r.model for r in written.ratchet.earlier] == ["org/ckpt-v1"]
    # the lines printed per entry: the change accepted and the change since the entry's origin
    line = next(line for line in update.lines if line.startswith("acc [c0]"))
    assert "lowered" in line and "-0.0800" in line and "since its origin 0.6867" in line


def test_reset_and_older_files():
    first = release(1)
    assert dumps(first).count(FORMAT) == 1 and '"ratchet"' not in dumps(first)  # no anchors: written as before
    reset = parse(dumps(reset_record(release(2), when="2026-02-01", why="re-baseline required: data changed")),
                  "reset.json")
    assert reset.ratchet.reset == ("2026-02-01", "re-baseline required: data changed")


@pytest.mark.parametrize("value", ["probe:acc", "suite/probe", "suite/probe:", "suite/probe:acc:c0:extra", "suite/g:::m:acc", ""])
def test_a_malformed_acceptance_is_an_option_error_naming_it(tmp_path, value):
    with pytest.raises(GateOptionError, match="--accept-regression="):
        checked_policy(baselines_dir=tmp_path, baseline_name="default", overrides={}, error_control="session",
                       update=True, update_new_only=False, score_only=False, baseline_ref=None,
                       accepted=[value], accept_reason="why")


@pytest.mark.parametrize("update, accepted, reason, message", [
    (False, ["suite/probe:acc"], "why", "give --snapshot-update too"),
    (True, ["suite/probe:acc"], None, "needs --accept-reason"),
    (True, [], "why", "--accept-reason gives the reason of an --accept-regression"),
])
def test_an_acceptance_needs_an_update_and_a_reason(tmp_path, update, accepted, reason, message):
    with pytest.raises(GateOptionError, match=message):
        checked_policy(baselines_dir=tmp_path, baseline_name="default", overrides={}, error_control="session",
                       update=update, update_new_only=False, score_only=False, baseline_ref=None,
                       accepted=accepted, accept_reason=reason)
    assert parse_acceptance("suite/probe:acc") == AcceptedRegression("suite/probe", "acc", None)


def test_a_bundle_member_can_be_named():
    assert parse_acceptance("bias/crows::crows_pairs_french:pct_stereotype:age") == AcceptedRegression(
        "bias/crows::crows_pairs_french", "pct_stereotype", "age")
    assert parse_acceptance("bias/crows::fr:acc") == AcceptedRegression("bias/crows::fr", "acc", None)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["entries"][0].update(recording="9"), "'ratchet.entries[0].recording' names no recording"),
    (lambda r: r["earlier"][0]["columns"]["acc"].pop(), "'ratchet.earlier[0].columns.acc' must hold one value per"),
    (lambda r: r["entries"].append(dict(r["entries"][0])), "is listed twice"),
])
def test_a_damaged_ratchet_block_names_the_file_and_key(edit, message):
    import json

    from pytest_modelbench.gate.baseline_file import checksum
    from pytest_modelbench.errors import BaselineError

    document = json.loads(dumps(updated(release(1), release(2))[1].record))
    edit(document["ratchet"])
    document["checksum"] = checksum(document)
    with pytest.raises(BaselineError, match="probe.json: invalid baseline: .*" + re.escape(message)):
        parse(json.dumps(document), "probe.json")
    document.pop("ratchet")
    document["checksum"] = checksum(document)
    with pytest.raises(BaselineError, match="key 'ratchet' belongs to format"):
        parse(json.dumps(document), "probe.json")
