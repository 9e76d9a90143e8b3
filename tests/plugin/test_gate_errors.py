"""The gate on bad input: stale, corrupt, hand-edited, missing and unused baselines."""

from __future__ import annotations

import json

from pytest_modelbench.gate.baseline_file import parse
from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    TASK,
    _one_torch_thread,
    bad_model,
    baseline_file,
    make_project,
    probe_docs,
    run_gate,
)


def test_editing_the_task_yaml_requires_a_rebaseline(pytester, tiny_model, probe_docs):
    suite = make_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    stored = baseline_file(pytester).read_bytes()

    result = run_gate(pytester, tiny_model, "--limit=10")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["re-baseline required: limit changed (None → 10). Not compared with baseline 'default' "
                                 "(baselines/default/probe/gate_probe.json)*"])

    yaml = suite / f"{TASK}.yaml"
    yaml.write_text(yaml.read_text().replace("Question: ", "Q: "))
    result = run_gate(pytester, tiny_model)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "re-baseline required: task config changed (*). Not compared with baseline 'default' "
        "(baselines/default/probe/gate_probe.json)*",
        "*run with --snapshot-update.",
        "*gate_probe*rebaseline-required*task config changed*",
    ])
    assert "regressed" not in result.stdout.str()
    assert baseline_file(pytester).read_bytes() == stored

    result = run_gate(pytester, tiny_model, "--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 snapshot updated.*", "*gate_probe*updated*re-recorded (re-baseline required: task config changed*"])
    run_gate(pytester, tiny_model).assert_outcomes(passed=1)


def test_corrupt_or_hand_edited_baseline_is_named_and_left_alone(pytester, tiny_model, probe_docs):
    make_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    path = baseline_file(pytester)
    good = path.read_text()

    truncated = good[: len(good) // 2]  # what an interrupted non-atomic write would leave
    path.write_text(truncated)
    result = run_gate(pytester, tiny_model)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"{path}: corrupt baseline, not valid JSON (*); restore it from version control, "
                                 "or re-create it with --snapshot-update"])
    assert path.read_text() == truncated

    edited = json.loads(good)
    edited["scores"]["overall"]["acc"]["value"] = 0.5
    path.write_text(json.dumps(edited, indent=2))
    hand_edited = path.read_text()
    result = run_gate(pytester, tiny_model, "--snapshot-update-new-only")  # writes missing baselines only
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"{path}: invalid baseline: checksum mismatch: the file was edited by hand or damaged*"])
    assert "Traceback" not in result.stdout.str()
    assert path.read_text() == hand_edited

    result = run_gate(pytester, tiny_model, "--snapshot-update")
    result.assert_outcomes(passed=1)
    parse(path.read_text(), path)
    run_gate(pytester, tiny_model).assert_outcomes(passed=1)


def test_missing_baseline_fails_once_the_gate_is_on(pytester, tiny_model, probe_docs):
    make_project(pytester, probe_docs, tasks=(TASK, "gate_probe_two"))
    run_gate(pytester, tiny_model, "--snapshot-update", "-k", "gate_probe_two").assert_outcomes(passed=1)
    recorded = baseline_file(pytester, "gate_probe_two").read_bytes()

    result = run_gate(pytester, tiny_model)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*baselines/default/probe/gate_probe.json: no baseline 'default' for task 'gate_probe'; record one from a "
        "trusted model with pytest --snapshot-update",
    ])
    result = run_gate(pytester, tiny_model, "--snapshot-update-new-only")
    result.assert_outcomes(passed=2)
    assert baseline_file(pytester).is_file()
    assert baseline_file(pytester, "gate_probe_two").read_bytes() == recorded


def test_unused_baselines_are_reported_like_syrupy(pytester, tiny_model, probe_docs):
    make_project(pytester, probe_docs, tasks=(TASK, "gate_probe_two"))
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=2)
    retired = baseline_file(pytester, "retired_task")
    retired.write_bytes(baseline_file(pytester).read_bytes())

    result = run_gate(pytester, tiny_model)
    result.assert_outcomes(passed=2)
    assert result.ret == 1  # as syrupy: unused baselines fail the session
    result.stdout.fnmatch_lines([
        "*1 baseline unused.*",
        "Unused retired_task (baselines/default/probe/retired_task.json)",
        "Re-run pytest with --snapshot-update to delete unused baselines.",
    ])
    # a deselected task keeps its baseline: only baselines whose task YAML is gone are unused
    result = run_gate(pytester, tiny_model, "-k", "gate_probe_two", "--snapshot-warn-unused")
    result.assert_outcomes(passed=1, deselected=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["Unused retired_task (*)"])
    assert "Unused gate_probe " not in result.stdout.str()

    result = run_gate(pytester, tiny_model, "--snapshot-update")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*1 unused baseline deleted.*", "Deleted retired_task (baselines/default/probe/retired_task.json)"])
    assert not retired.exists() and baseline_file(pytester).exists()
    assert run_gate(pytester, tiny_model).ret == 0
