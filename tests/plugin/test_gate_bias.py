"""The gate on the bias suite: ideal-point and aggregate metrics (CrowS-Pairs, StereoSet) through pytest."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.plugin.gate_project import _one_torch_thread, bad_model  # noqa: F401 - fixtures

REPO = Path(__file__).resolve().parents[2]


def test_bias_tasks_record_pass_and_gate_a_worse_model(pytester, tiny_model, bad_model, data_mirror):
    shutil.copytree(REPO / "suites" / "bias", pytester.path / "suites" / "bias")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    common = ("-p", "no:cacheprovider", f"--data-dir={data_mirror}", "--limit=60", "-k",
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

    junit = pytester.path / "junit.xml"
    result = pytester.runpytest(f"--model={tiny_model}", *common, f"--junitxml={junit}")
    result.assert_outcomes(passed=2, deselected=2)
    result.stdout.fnmatch_lines(["*2 task(s): 2 pass*"])
    tests = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name").startswith("modelbench.gate."):
                tests[prop.get("name")] = json.loads(prop.get("value"))["test"]
    for key in ("modelbench.gate.icat", "modelbench.gate.ss[gender]", "modelbench.gate.pct_stereotype[race-color]"):
        assert tests[key] == "bootstrap"  # ideal points and aggregates are bootstrapped, never McNemar
    assert "modelbench.gate.ss[religion]" not in tests  # an empty category has nothing to compare
    assert len(tests) == 20 + 12

    # another random model: whatever the verdicts, every entry is judged and the baselines stay untouched
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    result = pytester.runpytest(f"--model={bad_model}", *common)
    assert result.ret in (0, 1)
    result.stdout.fnmatch_lines(["*modelbench gate (baseline 'default')*", "*2 task(s):*"])
    assert "Traceback" not in result.stdout.str()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
