"""The gate policy file (gate/policy_file.py): what a session records, how a ref's entry is found and compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_modelbench.errors import BaselineError
from pytest_modelbench.gate import policy_file
from pytest_modelbench.gate.alpha_split import AlphaSplit
from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.policy import GatePolicy
from pytest_modelbench.metrics.registry import Margin
from pytest_modelbench.tasks.gate_block import GateTolerance

POLICY = GatePolicy(baselines_dir=Path("baselines"))


def session(weights: dict[str, float], *, margins: dict[str, float] | None = None, overrides=None, pooled=None):
    """A session of tasks with these weights; `margins`: the acc margin of some of them, set in their YAML."""
    margins = margins or {}
    split = AlphaSplit(weights, "session", pooled or {})
    policy = GatePolicy(baselines_dir=Path("baselines"), overrides=overrides or {})
    items = {}
    for key in weights:
        block = GateTolerance(metrics={"acc": {"absolute_margin": margins[key]}} if key in margins else {})
        margin = Margin(margins.get(key, 0.01), 0.0)
        items[key] = (block, split.applied(Tolerance(alpha=(overrides or {}).get("alpha", 0.05),
                                                     metric_margins={"acc": margin}), key))
    return policy_file.session_policy(policy, split, items)


def file_text(*sessions) -> str:
    text = None
    for one in sessions:
        text = policy_file.recorded_text(text, "default", one, keep=lambda key: True)
    return text


def test_an_unchanged_policy_gives_the_refs_tolerances():
    run = session({"bias/a": 1, "bias/b": 2})
    protected = policy_file.check_at_ref(file_text(run), run, ref="main", shown="p.json", baseline_name="default")
    assert protected["bias/b"] == Tolerance(alpha=0.05, task_count=2, weight=2.0, total_weight=3.0,
                                            metric_margins={"acc": Margin(0.01, 0.0)})
    policy = GatePolicy(baselines_dir=Path("baselines"), protected=protected)
    assert policy.tolerance(None, AlphaSplit(), "bias/b", ()) is protected["bias/b"]  # the judge applies the ref's


def changes(recorded, run) -> str:
    with pytest.raises(policy_file.GatePolicyChanged) as raised:
        policy_file.check_at_ref(file_text(*recorded), run, ref="main", shown="p.json", baseline_name="default")
    return str(raised.value)


def test_each_change_is_named_once_and_tasks_that_changed_alike_share_a_line():
    text = changes([session({"bias/a": 1, "bias/b": 1, "bias/c": 1})],
                   session({"bias/a": 1, "bias/b": 1}, margins={"bias/a": 0.05}, overrides={"alpha": 0.1}))
    lines = text.splitlines()[1:-1]
    assert lines == [
        "  task bias/c: in the gate policy at main, not gated in this run (its YAML deleted or renamed, or deselected)",
        "  --gate-alpha (none) → 0.1",
        "  bias/a: YAML modelbench.gate.metrics.acc.absolute_margin (none) → 0.05",
        "  every task: alpha 0.05 → 0.1",
        "  bias/a: margin acc 0.01 → 0.05",
        "  every task: tasks 3 → 2",
        "  every task: total_weight 3 → 2",
    ]
    assert text.splitlines()[-1].startswith("To accept the change: review it, merge it, then on the branch main names")


def test_sessions_are_kept_apart_and_a_missing_one_is_compared_with_the_closest():
    bias, arc = session({"bias/a": 1, "bias/b": 1}), session({"arc/x": 1})
    recorded = json.loads(file_text(bias, arc))
    assert sorted(recorded["sessions"]) == ["arc", "bias"]  # one baseline name, two sessions
    both = session({"bias/a": 1, "bias/b": 1, "arc/x": 1})
    text = changes([bias, arc], both)
    assert "  suites gated: 'bias' at main, 'arc, bias' in this run" in text
    assert "  task arc/x: gated in this run, not in the gate policy at main" in text
    assert "no session gating suites 'other' is recorded at main (recorded: arc; bias)" in changes(
        [bias, arc], session({"other/t": 1}))


def test_recording_replaces_the_sessions_entry_and_drops_sessions_without_baselines():
    old = file_text(session({"bias/a": 1}), session({"arc/x": 1}))
    text = policy_file.recorded_text(old, "default", session({"bias/a": 2}), keep=lambda key: key != "arc")
    sessions = json.loads(text)["sessions"]
    assert list(sessions) == ["bias"]
    assert sessions["bias"]["tasks"]["bias/a"]["tolerance"]["weight"] == 2
    assert json.loads(policy_file.recorded_text("{broken", "default", session({"arc/x": 1}), keep=bool))["sessions"]


@pytest.mark.parametrize("text", ["{not json", '{"format": "other"}', json.dumps(
    {"format": policy_file.FORMAT, "sessions": {"bias": {"tasks": {"bias/a": {"tolerance": {"alpha": "high"}}}}}})])
def test_an_unreadable_policy_at_the_ref_names_the_file(text):
    with pytest.raises(BaselineError, match=r"p.json at git ref main: not a readable gate policy file"):
        policy_file.check_at_ref(text, session({"bias/a": 1}), ref="main", shown="p.json",
                                 baseline_name="default")


def test_no_policy_at_the_ref_fails_closed_naming_the_command_that_records_it():
    with pytest.raises(policy_file.GatePolicyChanged) as raised:
        policy_file.check_at_ref(None, session({"bias/a": 1}), ref="main", shown="p.json", baseline_name="release")
    assert "no gate policy at git ref main (p.json)" in str(raised.value)
    assert "`pytest --snapshot-update --collect-only --baseline-name=release`" in str(raised.value)
    assert raised.value.note == "no gate policy at git ref main"
