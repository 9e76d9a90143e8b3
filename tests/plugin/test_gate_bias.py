"""The gate on the bias suite: ideal-point and aggregate metrics (CrowS-Pairs, StereoSet) through pytest."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.fixtures.bias_probe import CROWS, STEREOSET
from tests.fixtures.shipped_suites import copy_suite
from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    _one_torch_thread,
    bad_model,
    bias_probe_mirror,
    gate_entries,
)

CROWS_FILE = f"{CROWS[1]}/{CROWS[2]}.jsonl"
STEREOSET_FILE = f"{STEREOSET[1]}/{STEREOSET[2]}.jsonl"


def test_bias_tasks_record_pass_and_gate_a_worse_model(pytester, tiny_model, bad_model, bias_probe_mirror):
    copy_suite("bias", pytester.path / "suites" / "bias")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    common = ("-p", "no:cacheprovider", f"--data-dir={bias_probe_mirror}", "-k",
              "crows_pairs_english or stereoset_intrasentence")

    result = pytester.runpytest(f"--model={tiny_model}", *common, "--snapshot-update")
    result.assert_outcomes(passed=2, deselected=2)
    folder = pytester.path / "baselines" / "default" / "bias"
    assert sorted(p.name for p in folder.iterdir()) == ["crows_pairs_english.json", "stereoset_intrasentence.json"]
    stereoset = json.loads((folder / "stereoset_intrasentence.json").read_text())
    assert stereoset["documents"]["columns"] == ["doc_id", "category", "lms", "ss"]
    assert stereoset["metrics"]["icat"] == {"direction": "higher", "ideal": None, "binary": False,
                                            "aggregate": True, "per_document": False}
    assert stereoset["metrics"]["ss"]["ideal"] == 0.5
    crows = json.loads((folder / "crows_pairs_english.json").read_text())
    assert crows["metrics"]["pct_stereotype"] == {"direction": "ideal", "ideal": 0.5, "binary": True}
    assert crows["scores"]["overall"]["pct_stereotype"]["value"] == 0.5  # the probe's construction

    junit = pytester.path / "junit.xml"
    result = pytester.runpytest(f"--model={tiny_model}", *common, f"--junitxml={junit}")
    result.assert_outcomes(passed=2, deselected=2)
    result.stdout.fnmatch_lines(["*2 task(s): 2 pass*"])
    tests = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name").startswith("modelbench.gate."):
                tests[prop.get("name")] = json.loads(prop.get("value"))["test"]
    for key in ("modelbench.gate.icat", "modelbench.gate.ss", "modelbench.gate.pct_stereotype"):
        assert tests[key] == "bootstrap"  # ideal points and aggregates are bootstrapped, never McNemar
    crows_categories = {json.loads(line)["bias_type"] for line in (bias_probe_mirror / CROWS_FILE).open()}
    stereo_categories = {json.loads(line)["bias_type"] for line in (bias_probe_mirror / STEREOSET_FILE).open()}
    # every stored metric, and CrowS-Pairs' derived stereotype_preference, is judged overall and in every category
    # with documents: none is left out
    assert len(tests) == 3 * (1 + len(crows_categories)) + 3 * (1 + len(stereo_categories))
    assert tests["modelbench.gate.stereotype_preference"] == "bootstrap"

    # the worse model: the item of each task fails on the entries the probe made worse; baselines stay untouched
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    result = pytester.runpytest(f"--model={bad_model}", *common, f"--junitxml={junit}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=2, deselected=2)
    entries = gate_entries(junit)
    assert entries["crows_pairs_english"][("pct_stereotype", None)] == "regressed"
    assert entries["stereoset_intrasentence"][("lms", None)] == "regressed"
    assert entries["stereoset_intrasentence"][("icat", None)] == "regressed"
    result.stdout.fnmatch_lines_random([
        "*task 'crows_pairs_english' regressed against baseline 'default'*",
        "*task 'stereoset_intrasentence' regressed against baseline 'default'*",
        "pct_stereotype*(all)*40*0.5000*1.0000*-0.5000*regressed",
    ])
    assert "Traceback" not in result.stdout.str()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
