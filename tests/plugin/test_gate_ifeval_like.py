"""An IFEval-like task (tests/fixtures/ifeval_like: process_results returning a list per document for an
`aggregation: !function`) runs end to end under --allow-task-code: its items pass, its lists are stored in the
baseline with their own lengths, the next run is gated against them, and its log samples hold them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.plugin.gate_project import _one_torch_thread, run_gate  # noqa: F401 - fixtures

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ifeval_like"
REPO = Path(__file__).resolve().parents[2]


def test_an_ifeval_like_task_records_its_lists_and_is_gated_on_them(pytester, tiny_model):
    import jsonschema

    shutil.copytree(FIXTURE, pytester.path / "suites" / "ifeval")
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    results = pytester.path / "results.json"
    run_gate(pytester, tiny_model, "--allow-task-code", "--snapshot-update").assert_outcomes(passed=1)
    baseline = json.loads((pytester.path / "baselines" / "default" / "ifeval" / "ifeval_like.json").read_text())
    assert baseline["metrics"]["inst_level_strict_acc,none"]["lists"] is True
    lengths = [len(row[-1]) for row in baseline["documents"]["rows"].values()]
    assert sorted(set(lengths)) == [1, 2, 3]
    gated = run_gate(pytester, tiny_model, "--allow-task-code", f"--results-json={results}", "--log-samples")
    gated.assert_outcomes(passed=1)
    gated.stdout.fnmatch_lines(["*ifeval/ifeval_like*pass*"])
    document = json.loads(results.read_text())
    schema = REPO / "pytest_modelbench" / "schemas" / "results.schema.json"
    jsonschema.validate(document, json.loads(schema.read_text()))
    samples = document["samples"]["ifeval/ifeval_like"]
    assert [len(s["metrics"]["inst_level_loose_acc,none"]) for s in samples] == lengths


GROUP = """
group: ifeval_group
task:
  - ifeval_a
  - ifeval_b
aggregate_metric_list:
  - metric: inst_level_strict_acc
    weight_by_size: false
  - metric: prompt_level_strict_acc
    weight_by_size: true
metadata:
  version: 1
"""


def test_a_group_of_ifeval_like_tasks_is_gated_on_their_lists(pytester, tiny_model):
    """The group re-applies each task's agg_inst_level_acc to resampled documents, whose lists may all be of one
    length in a resample (made dense by the group's column): each is still one document's list."""
    suite = pytester.path / "suites" / "g"
    for name in ("a", "b"):
        shutil.copytree(FIXTURE, suite / name)
        task = suite / name / "ifeval_like.yaml"
        task.rename(suite / name / f"ifeval_{name}.yaml")
        path = suite / name / f"ifeval_{name}.yaml"
        path.write_text(path.read_text().replace("task: ifeval_like", f"task: ifeval_{name}"))
    (suite / "_g.yaml").write_text(GROUP)
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    run_gate(pytester, tiny_model, "--allow-task-code", "--snapshot-update").assert_outcomes(passed=3)
    group = json.loads((pytester.path / "baselines" / "default" / "g" / "ifeval_group.json").read_text())
    assert group["metrics"]["inst_level_strict_acc"]["lists"] is True
    run_gate(pytester, tiny_model, "--allow-task-code").assert_outcomes(passed=3)
