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
    run_gate(pytester, bad_model, "--snapshot-update", f"--accept-regression=probe/{TASK}:acc",
             f"--accept-regression=probe/{TASK}:acc:disagree", "--accept-reason=lowered").assert_outcomes(passed=1)
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


SECOND = "gate_probe_second"
POLICY = "baselines/default/gate-policy.json"


def loosen(pytester, change: str) -> tuple[str, ...]:
    """Apply one change a pull request could make to loosen the gate; the extra gate options it passes."""
    suite = pytester.path / "suites" / "probe"
    if change == "margin":  # the task YAMLs' gate blocks widen the margin of acc a hundred-fold: the regression passes
        for yaml in suite.glob("*.yaml"):
            yaml.write_text(yaml.read_text() + "  gate:\n    metrics:\n      acc:\n        absolute_margin: 1.0\n")
    elif change == "reweight":  # the ini gives the task three times the others' share of alpha
        pytester.makeini(f"[pytest]\nmodelbench_suites = suites\nmodelbench_gate_weights =\n    probe/{TASK} = 3\n")
    elif change == "delete":  # the task and its baseline go, together
        (suite / f"{SECOND}.yaml").unlink()
        baseline_file(pytester, SECOND).unlink()
    return {"alpha": ("--gate-alpha=0.2",), "error-control": ("--gate-error-control=task",)}.get(change, ())


CHANGES = {  # a change a pull request could make to loosen the gate → the lines that must name it
    "margin": ["  every task: YAML modelbench.gate.metrics.acc.absolute_margin (none) → 1",
               "  every task: margin acc 0.01 → 1"],
    "alpha": ["  --gate-alpha (none) → 0.2", "  every task: alpha 0.05 → 0.2"],
    "error-control": ['  --gate-error-control "session" → "task"'],
    "reweight": [f"  probe/{TASK}: weight 1 → 3", "  every task: total_weight 3 → 6"],
    "delete": [f"  task probe/{SECOND}: in the gate policy at HEAD, not gated in this run*"],
}


def test_pull_request_that_loosens_the_gate_fails_before_scoring(pytester, tiny_model, bad_model, probe_docs):
    """The ref protects the policy as well as the numbers: each change fails every task, naming the change, and the
    regressed checkpoint is not even scored."""
    make_project(pytester, probe_docs, tasks=(TASK, SECOND))
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=2)
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "baselines and their gate policy")

    md = pytester.path / "gate.md"
    for change, named in CHANGES.items():
        git(pytester.path, "reset", "-q", "--hard")  # the pull request under review makes this one change
        result = run_gate(pytester, bad_model, "--baseline-ref=HEAD", f"--md-report={md}", *loosen(pytester, change))
        assert result.ret == pytest.ExitCode.TESTS_FAILED, change
        tasks = (TASK,) if change == "delete" else (TASK, SECOND)
        result.assert_outcomes(failed=len(tasks))
        result.stdout.fnmatch_lines([
            f"*gate policy changed: this run's is not the one recorded at git ref HEAD ({POLICY}), so it would not "
            "be judged by the ref's gate; nothing was scored.", *named,
            "To accept the change: review it, merge it, then on the branch HEAD names, record it with `pytest "
            "--snapshot-update --collect-only --baseline-name=default` and this run's suites and gate options*",
        ])
        assert "modelbench scores" not in result.stdout.str()  # nothing was scored
        assert sorted(line.split("|")[1].strip() for line in md.read_text().splitlines()  # the pull request's comment
                      if line.startswith("| probe/") and "| policy-changed |" in line) == [f"probe/{t}" for t in tasks]


def test_policy_is_recorded_without_scoring_and_a_ref_without_one_fails_closed(pytester, tiny_model, probe_docs):
    make_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "rm", "-q", "--cached", "--ignore-unmatch", POLICY)  # an older ref: baselines, no policy
    git(pytester.path, "commit", "-q", "-m", "baselines only")
    (pytester.path / POLICY).unlink(missing_ok=True)

    result = run_gate(pytester, tiny_model, "--baseline-ref=HEAD")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*no gate policy at git ref HEAD ({POLICY}): the ref's margins, alpha, weights and "
                                 "task set are unrecorded*On the branch HEAD names, record it with `pytest "
                                 "--snapshot-update --collect-only --baseline-name=default`*nothing was scored*"])

    # the command the message names records the policy from the task YAMLs and options alone
    result = pytester.runpytest("-p", "no:cacheprovider", "--snapshot-update", "--collect-only")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"*gate policy of suites 'probe' recorded in {POLICY}*"])
    recorded = json.loads((pytester.path / POLICY).read_text())["sessions"]["probe"]["tasks"][f"probe/{TASK}"]
    assert recorded["tolerance"]["metric_margins"]["acc"] == {"absolute": 0.01, "relative": 0.0}
    git(pytester.path, "add", POLICY)
    git(pytester.path, "commit", "-q", "-m", "its gate policy")
    run_gate(pytester, tiny_model, "--baseline-ref=HEAD").assert_outcomes(passed=1)

    # a run over part of the suite records no policy: its task set is not the suite's
    make_project(pytester, probe_docs, tasks=(TASK, SECOND))
    before = (pytester.path / POLICY).read_text()
    result = pytester.runpytest("-p", "no:cacheprovider", "--snapshot-update", "--collect-only", "-k", SECOND)
    result.stdout.fnmatch_lines(["*gate policy not recorded: items were deselected*"])
    assert (pytester.path / POLICY).read_text() == before


def test_recorded_policy_holds_the_tolerance_the_judge_applied(pytester, tiny_model, probe_docs):
    """The policy is computed at collection, the judge's tolerance after scoring: for tasks and groups alike they
    agree, so a ref run (which applies the ref's) judges as the recording run did."""
    from tests.plugin.test_gate_group import make_group_project

    make_group_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=6)  # 3 groups, 3 tasks
    recorded = json.loads((pytester.path / POLICY).read_text())["sessions"]["probe"]["tasks"]
    assert len(recorded) == 6
    for key, entry in recorded.items():
        stored = json.loads(baseline_file(pytester, key.split("/", 1)[1]).read_text())
        assert entry["tolerance"] == stored["gate"], key
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "baselines and their gate policy")
    run_gate(pytester, tiny_model, "--baseline-ref=HEAD").assert_outcomes(passed=6)


SHIPPED_SESSIONS = {
    "bias": ["suites/bias"], "arc_gen": ["suites/arc_gen"], "arc_sampled": ["suites/arc_sampled"],
    "perplexity": ["suites/perplexity"],
    "bbq": ["--allow-task-code", "suites/bbq/bbq_sample.yaml"],  # BBQ is gated on its sample (bias-suite.md)
    "winobias": ["--allow-task-code", "suites/winobias"],
}


def test_every_session_of_the_shipped_gate_policy_is_checked():
    from tests.plugin.gate_project import REPO

    assert set(json.loads((REPO / POLICY).read_text())["sessions"]) == set(SHIPPED_SESSIONS)


@pytest.mark.parametrize("suite, selection", sorted(SHIPPED_SESSIONS.items()))
def test_shipped_gate_policy_is_the_one_the_shipped_suites_give(tmp_path, suite, selection):
    """baselines/default/gate-policy.json must follow the suites: a change to a shipped suite's gate block (or to a
    default margin) fails here until the policy is recorded again with the command below."""
    import sys

    from tests.plugin.gate_project import REPO

    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--snapshot-update", "--collect-only",
               f"--baselines-dir={tmp_path}", "--baseline-name=default", *selection]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    recorded = json.loads((tmp_path / "default" / "gate-policy.json").read_text())["sessions"][suite]
    shipped = json.loads((REPO / POLICY).read_text())["sessions"][suite]
    assert recorded == shipped, f"record it again: pytest --snapshot-update --collect-only --baseline-name=default " \
                                f"{' '.join(selection)}"
