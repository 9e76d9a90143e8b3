"""A task scored by its own process_results (--allow-task-code) is gated end to end: its per-document values are
stored, a worse model regresses on them, with a mean (paired bootstrap) and a median (the aggregate bootstrap)."""

from __future__ import annotations

import textwrap

from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    SUITE,
    TASK,
    _one_torch_thread,
    bad_model,
    baseline_file,
    gate_entries,
    make_project,
    probe_docs,
    run_gate,
)

UTILS = """
def margin(doc, results):
    lls = [ll for ll, _ in results]
    gold = int(doc["label"])
    return {"right": float(lls.index(max(lls)) == gold), "gap": lls[gold] - max(lls[:gold] + lls[gold + 1:])}
"""


def test_a_worse_model_regresses_on_process_results_values(pytester, tiny_model, bad_model, probe_docs):
    suite = make_project(pytester, probe_docs)
    task_yaml = suite / f"{TASK}.yaml"
    text = task_yaml.read_text().replace("metric_list:\n  - metric: acc\n", textwrap.dedent("""\
        process_results: !function utils.margin
        metric_list:
          - metric: right
            higher_is_better: true
          - metric: gap
            aggregation: median
            higher_is_better: true
        """))
    task_yaml.write_text(text)
    (suite / "utils.py").write_text(UTILS)
    refused = run_gate(pytester, tiny_model, "--snapshot-update")
    refused.assert_outcomes(errors=1)
    refused.stdout.fnmatch_lines(["*process_results*--allow-task-code*"])

    run_gate(pytester, tiny_model, "--allow-task-code", "--snapshot-update").assert_outcomes(passed=1)
    assert '"gap": {"direction": "higher", "ideal": null, "binary": false, "aggregate": true' in \
        baseline_file(pytester).read_text()
    run_gate(pytester, tiny_model, "--allow-task-code").assert_outcomes(passed=1)
    junit = pytester.path / "junit.xml"
    result = run_gate(pytester, bad_model, "--allow-task-code", f"--junitxml={junit}")
    result.assert_outcomes(failed=1)
    entries = gate_entries(junit)[TASK]
    assert entries[("right", None)] == entries[("right", "disagree")] == "regressed"
    assert entries[("gap", "disagree")] == "regressed"
    # lm-eval's median of the 40 gaps is the 21st smallest: with the 20 disagreeing documents' gaps turned negative it
    # is the smallest positive one, so the overall median hardly moves and its bootstrap cannot tell (numpy's median,
    # the mean of the 20th and 21st, would fall to about 0 and regress).
    assert entries[("gap", None)] == "inconclusive"
    assert entries[("right", "agree")] == "pass"
