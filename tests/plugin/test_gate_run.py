"""The baseline gate end to end on tiny models: record, pass, catch a worse model, report improvements."""

from __future__ import annotations

import json

import pytest

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


def test_record_then_same_model_passes_at_batch_size_1_and_8(pytester, tiny_model, probe_docs):
    make_project(pytester, probe_docs, metrics=("acc", "acc_norm", "likelihood_diff"))
    result = run_gate(pytester, tiny_model, "--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 snapshot generated.*", "*gate_probe*created*baseline written to baselines/default/probe/gate_probe.json*"])
    stored = baseline_file(pytester).read_bytes()

    for batch_size in ("1", "8"):
        md = pytester.path / f"gate-{batch_size}.md"
        result = run_gate(pytester, tiny_model, f"--batch-size={batch_size}", f"--md-report={md}")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["*1 snapshot passed.*", "*1 task(s): 1 pass*"])
        assert "gate **passed**" in md.read_text() and "| probe/gate_probe | pass |" in md.read_text()
    # --snapshot-update with everything inside the band rewrites nothing (not even the date)
    result = run_gate(pytester, tiny_model, "--batch-size=8", "--snapshot-update")
    result.assert_outcomes(passed=1)
    assert baseline_file(pytester).read_bytes() == stored


def test_worse_model_fails_with_the_category_table(pytester, tiny_model, bad_model, probe_docs):
    make_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    stored = baseline_file(pytester).read_bytes()

    junit, md, results = pytester.path / "junit.xml", pytester.path / "gate.md", pytester.path / "results.json"
    result = run_gate(pytester, bad_model, f"--junitxml={junit}", f"--md-report={md}", f"--results-json={results}")
    result.assert_outcomes(failed=1)
    # only the category where the two models disagree, and the task as a whole, are flagged
    assert gate_entries(junit)[TASK] == {
        ("acc", "disagree"): "regressed", ("acc", None): "regressed", ("acc", "agree"): "pass",
    }
    result.stdout.fnmatch_lines([
        f"*task 'gate_probe' regressed against baseline 'default' (baselines/default/probe/gate_probe.json): "
        f"2 of 3 entries worse by more than the margin (candidate {bad_model}, baseline recorded with {tiny_model})",
        "metric*category*n*baseline*candidate*delta*margin*p-value*MDE*verdict",
        "acc*disagree*20*1.0000*0.0000*-1.0000*0.0100*<0.0001*regressed",
        "acc*(all)*40*1.0000*0.5000*-0.5000*0.0100*<0.0001*regressed",
        "acc*agree*20*1.0000*1.0000*+0.0000*0.0100*1.0000*pass",
        "*1 snapshot failed.*",
        "*false blocks: at most 0.05 for the 1 gated task(s) together when nothing regressed past its margin*",
        "task*gate*detail*caught at 80%",
        "probe/gate_probe*regressed*acc ?disagree? -1.0000*acc 0.2*",  # 0.01 + (z_0.975 + z_0.8) × 0.08
    ])
    assert "Traceback" not in result.stdout.str()
    text = md.read_text()
    assert "gate **failed**" in text and "### probe/gate_probe: regressed" in text
    # "<" is an HTML entity in the md: rendered "<0.0001"
    assert "| acc | disagree | 20 | 1.0000 | 0.0000 | -1.0000 | 0.0100 | &lt;0.0001 |" in text
    assert baseline_file(pytester).read_bytes() == stored  # a failing run never touches the baseline
    check_results_json(results, tiny_model)

    # --snapshot-update never lowers a reference unasked (docs/baselines.md, "Ratcheting references") ...
    result = run_gate(pytester, bad_model, "--snapshot-update")
    result.assert_outcomes(failed=1)
    assert baseline_file(pytester).read_bytes() == stored
    # ... accepting the regressed entries by name re-records the baseline, after which it passes against itself
    result = run_gate(pytester, bad_model, "--snapshot-update", "--accept-regression=probe/gate_probe:acc",
                      "--accept-regression=probe/gate_probe:acc:disagree", "--accept-reason=the new model")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 snapshot updated.*"])
    assert baseline_file(pytester).read_bytes() != stored
    run_gate(pytester, bad_model).assert_outcomes(passed=1)


def test_improvement_passes_is_reported_and_raises_the_bar_on_update(pytester, tiny_model, bad_model, probe_docs):
    make_project(pytester, probe_docs)
    run_gate(pytester, bad_model, "--snapshot-update").assert_outcomes(passed=1)
    stored = baseline_file(pytester).read_bytes()

    result = run_gate(pytester, tiny_model)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*gate_probe*improved*2 improved*",
        "*improved*acc ?disagree?: 0.0000 -> 1.0000 (p=<0.0001); run --snapshot-update to raise the baseline*",
    ])
    assert baseline_file(pytester).read_bytes() == stored
    result = run_gate(pytester, tiny_model, "--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 snapshot updated.*"])
    assert baseline_file(pytester).read_bytes() != stored


def test_tolerance_from_the_yaml_and_cli_overrides(pytester, tiny_model, bad_model, probe_docs):
    suite = make_project(pytester, probe_docs)
    yaml = suite / f"{TASK}.yaml"
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=1)
    # the gate block is not part of the config hash: loosening it needs no re-baseline
    yaml.write_text(yaml.read_text() + "  gate:\n    absolute_margin: 1.0\n")
    run_gate(pytester, bad_model).assert_outcomes(passed=1)
    run_gate(pytester, bad_model, "--gate-margin=0.01").assert_outcomes(failed=1)
    # a metric's own entry wins over the task-wide margin; the command line wins over both
    relaxed = yaml.read_text()
    yaml.write_text(relaxed + "    metrics:\n      acc: {absolute_margin: 0.01}\n")
    run_gate(pytester, bad_model).assert_outcomes(failed=1)
    run_gate(pytester, bad_model, "--gate-margin=1.0").assert_outcomes(passed=1)
    yaml.write_text(relaxed)
    # 20 of 20 discordant documents give p ≈ 2e-6: not significant at alpha 1e-9, so inconclusive, which passes
    result = run_gate(pytester, bad_model, "--gate-margin=0.01", "--gate-alpha=1e-9")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*gate_probe*inconclusive*", "*inconclusive*acc ?disagree?: n=20, delta -1.0000*(passes)"])
    result = run_gate(pytester, bad_model, "--gate-alpha=2")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--gate-alpha must lie between 1e-09 and 0.5, got 2.0*"])


def test_baseline_is_chosen_by_name_never_by_model_id(pytester, tiny_model, bad_model, probe_docs):
    make_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--baseline-name=release", "--snapshot-update").assert_outcomes(passed=1)
    assert baseline_file(pytester, name="release").is_file()
    assert not baseline_file(pytester).exists()
    # baselines of another name are never used: the default name and an unknown one have none, and fail
    for args, name in (((), "default"), (("--baseline-name=nightly",), "nightly")):
        result = run_gate(pytester, tiny_model, *args)
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines([f"*no baselines '{name}' (baselines/{name} does not exist)*"])
    # a new checkpoint is compared with the baseline the old one wrote; the provenance names the old one
    pytester.makeini("[pytest]\nmodelbench_suites = suites\nmodelbench_baseline_name = release\n")
    result = run_gate(pytester, bad_model)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*against baseline 'release'*(candidate {bad_model}, baseline recorded with {tiny_model})"])


def test_no_baselines_fails_closed_and_scoring_only_is_explicit(pytester, tiny_model, probe_docs):
    make_project(pytester, probe_docs)
    results = pytester.path / "results.json"
    record = "`pytest --snapshot-update --baseline-name=default`"
    # no baselines/default/: every task item fails before it is scored, naming the command that records them
    result = run_gate(pytester, tiny_model, f"--results-json={results}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        f"*no baselines 'default' (baselines/default does not exist): the gate has nothing to compare with. Record "
        f"them from a trusted model with {record} and this run's other options, or pass --score-only to score "
        "without a gate",
        "*modelbench gate (baseline 'default')*",
        "*1 task(s): 1 missing*",
    ])
    assert not (pytester.path / "baselines").exists()
    assert not results.exists()  # nothing was scored

    # --score-only: the scores, and a summary and results JSON that say no gate ran
    result = run_gate(pytester, tiny_model, "--score-only", f"--results-json={results}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*modelbench scores*", f"*/{TASK}*acc*40",
        "*modelbench gate: not run (--score-only)*",
        "no gate ran: the scores of 1 task(s) were compared with no baseline; they pass no release gate",
    ])
    assert "1 task(s): 1 pass" not in result.stdout.str()  # no gate verdict
    document = json.loads(results.read_text())
    key = f"probe/{TASK}"
    assert document["results"][key]["n"] == 40
    assert (document["gate"][key]["status"], document["gate"][key]["note"]) == ("off", "--score-only: no gate ran")
    assert not (pytester.path / "baselines").exists()

    # it reads and writes no baseline and gives no verdict, so options that do are refused
    for option in ("--snapshot-update", "--md-report=gate.md"):
        result = run_gate(pytester, tiny_model, "--score-only", option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*--score-only runs no gate: drop {option.split('=')[0]}*"])


def check_results_json(path, baseline_model):
    """The regressed run's --results-json: valid against the shipped schema, with the failure table's entries."""
    import jsonschema

    from pytest_modelbench.outputs.results import RESULTS_SCHEMA

    document = json.loads(path.read_text())
    jsonschema.validate(document, json.loads(RESULTS_SCHEMA.read_text()))
    outcome = document["gate"][f"{SUITE}/{TASK}"]
    assert outcome["status"] == "regressed"
    assert outcome["baseline"] == f"baselines/default/{SUITE}/{TASK}.json"
    assert outcome["baseline_provenance"]["model"] == str(baseline_model)
    assert [(e["metric"], e["category"], e["baseline"], e["candidate"], e["verdict"]) for e in outcome["entries"]] == [
        ("acc", "disagree", 1.0, 0.0, "regressed"), ("acc", None, 1.0, 0.5, "regressed"), ("acc", "agree", 1.0, 1.0, "pass"),
    ]
