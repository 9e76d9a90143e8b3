"""--baseline-ref: the gate reads the baselines from a git ref, so lowering them in the working tree moves no bar."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    TASK,
    _one_torch_thread,
    bad_model,
    baseline_file,
    make_project,
    probe_docs,
    run_gate,
)

SHOWN = f"baselines/default/probe/{TASK}.json"


def git(repo, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", *args],
                   cwd=repo, check=True, capture_output=True)


def test_lowered_working_tree_baseline_still_fails_the_regressed_checkpoint(pytester, tiny_model, bad_model,
                                                                           probe_docs):
    make_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "baselines")
    # the change under review lowers the bar to the regressed checkpoint's own scores: against it, it would pass
    run_gate(pytester, bad_model, "--snapshot-update").assert_outcomes(passed=1)
    run_gate(pytester, bad_model).assert_outcomes(passed=1)

    md, html, results = (pytester.path / name for name in ("gate.md", "gate.html", "results.json"))
    result = run_gate(pytester, bad_model, "--baseline-ref=HEAD", f"--md-report={md}", f"--html-report={html}",
                      f"--results-json={results}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        f"*task '{TASK}' regressed against baseline 'default'*",
        "*baselines read from git ref HEAD, not from the working tree*",
        f"*working tree differs from HEAD: {SHOWN} (task probe/{TASK}); the gate used the ref's file*",
    ])
    assert f"- working tree differs from HEAD: {SHOWN}" in md.read_text()
    assert "<td>yes</td>" in html.read_text() and "baselines read from git ref HEAD" in html.read_text()
    outcome = json.loads(results.read_text())["gate"][f"probe/{TASK}"]
    assert (outcome["status"], outcome["baseline_ref"], outcome["working_tree_differs"]) == ("regressed", "HEAD", True)

    git(pytester.path, "commit", "-q", "-am", "lowered")  # once the ref holds the same files, nothing differs
    result = run_gate(pytester, bad_model, "--baseline-ref=HEAD")
    result.assert_outcomes(passed=1)
    assert "working tree differs" not in result.stdout.str()


def test_baseline_ref_fails_closed(pytester, tiny_model, probe_docs):
    make_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)

    result = run_gate(pytester, tiny_model, "--baseline-ref=HEAD")  # not a git repository
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--baseline-ref HEAD: *baselines is not in a git repository*"])

    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "baselines")
    result = run_gate(pytester, tiny_model, "--baseline-ref=origin/nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--baseline-ref origin/nope: no such commit, branch or tag in the git repository*"])

    result = run_gate(pytester, tiny_model, "--baseline-ref=HEAD", "--snapshot-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--baseline-ref reads the baselines from git and cannot write them*"])

    git(pytester.path, "rm", "-q", "--cached", SHOWN)  # the ref has no baseline; the working tree still has one
    git(pytester.path, "commit", "-q", "-m", "drop the baseline")
    assert baseline_file(pytester).is_file()
    result = run_gate(pytester, tiny_model, "--baseline-ref=HEAD")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{SHOWN}: no baseline 'default' for task '{TASK}' at git ref HEAD*"])
