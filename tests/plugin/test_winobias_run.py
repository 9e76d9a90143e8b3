"""`pytest --model=... --allow-task-code suites/winobias` through pytest on a tiny causal model: the suite's task code
is refused without the option, and with it both tasks record baselines and are gated per type, the pair task with
CrowS-Pairs' entries (its derived stereotype_preference included)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from tests.fixtures.shipped_suites import copy_suite
from tests.plugin.gate_project import _one_torch_thread  # noqa: F401 - fixture

TASKS = ["winobias_coreference", "winobias_pairs"]


def test_winobias_needs_allow_task_code_and_then_collects_two_tasks(pytester):
    copy_suite("winobias", pytester.path / "winobias")
    result = pytester.runpytest("winobias", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*process_docs*uses '!function winobias.process_docs'*pass --allow-task-code*"])
    result = pytester.runpytest("winobias", "--collect-only", "-q", "--allow-task-code")
    assert sorted(line.split("::")[-1] for line in result.outlines if "::" in line) == TASKS


def test_winobias_records_baselines_and_gates_each_type(pytester, tiny_model, data_mirror):
    copy_suite("winobias", pytester.path / "suites" / "winobias")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    common = ("-p", "no:cacheprovider", f"--model={tiny_model}", f"--data-dir={data_mirror}", "--allow-task-code",
              "--limit=300")
    result = pytester.runpytest(*common, "--snapshot-update")
    result.assert_outcomes(passed=2)
    folder = pytester.path / "baselines" / "default" / "winobias"
    assert sorted(p.name for p in folder.iterdir()) == [f"{task}.json" for task in TASKS]
    pairs = json.loads((folder / "winobias_pairs.json").read_text())
    assert pairs["category_field"] == "type"
    assert pairs["metrics"]["pct_stereotype"] == {"direction": "ideal", "ideal": 0.5, "binary": True}
    coreference = json.loads((folder / "winobias_coreference.json").read_text())
    assert coreference["metrics"]["acc_gap"]["direction"] == "ideal" and coreference["metrics"]["acc_gap"]["ideal"] == 0
    assert coreference["metrics"]["acc_pro"]["direction"] == "higher"

    junit = pytester.path / "junit.xml"
    result = pytester.runpytest(*common, f"--junitxml={junit}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*2 task(s): 2 pass*"])
    entries = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name").startswith("modelbench.gate."):
                entries[(case.get("name"), prop.get("name"))] = json.loads(prop.get("value"))
    # the first 300 templates are all type_1: each metric overall and in type_1 (type_2 has no documents)
    expected = {("winobias_pairs", f"modelbench.gate.{metric}{category}")
                for metric in ("pct_stereotype", "likelihood_diff", "stereotype_preference")
                for category in ("", "[type_1]")}
    expected |= {("winobias_coreference", f"modelbench.gate.{metric}{category}")
                 for metric in ("acc_pro", "acc_anti", "acc_gap") for category in ("", "[type_1]")}
    assert set(entries) == expected
    assert all(entry["verdict"] != "regressed" for entry in entries.values())
