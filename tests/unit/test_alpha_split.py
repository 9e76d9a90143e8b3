"""Per-task weights in the session's split of alpha (gate/alpha_split.py): the levels, the ini and YAML keys, the
reports, baseline files and run records (no scoring)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.gate.alpha_split import AlphaSplit, UnweighedItemError
from pytest_modelbench.gate.baseline import Tolerance, comparability_problems
from pytest_modelbench.gate.baseline_file import dumps, parse
from pytest_modelbench.gate.policy import GateOptionError, GatePolicy, checked_weights
from pytest_modelbench.gate.result import STATUS_COMPARED, GateResult
from pytest_modelbench.outputs.gate_summary import alpha_share, error_rate_line
from pytest_modelbench.outputs.record_merge import merge
from pytest_modelbench.outputs.result_properties import properties, result_from_properties
from pytest_modelbench.outputs.run_record import RunRecordError, read_record, record_text
from pytest_modelbench.run.sharding import Shard
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.groups import load_group_config
from tests.fixtures.gate_records import make_record
from tests.fixtures.gate_tasks import task_yaml

KEYS = ("bias/crows_pairs_english", "bias/crows_pairs_french", "bias/stereoset_intra", "bias/stereoset_inter")


def policy(error_control: str = "session", **weights: float) -> GatePolicy:
    return GatePolicy(Path("baselines"), error_control=error_control,
                      weights={key.replace("__", "/"): w for key, w in weights.items()})


def test_weights_3_1_1_1_split_alpha_into_a_half_and_sixths():
    split = policy().alpha_split({KEYS[0]: 3.0, KEYS[1]: None, KEYS[2]: None, KEYS[3]: None}, KEYS)
    levels = {key: split.applied(Tolerance(alpha=0.05), key).task_alpha for key in KEYS}
    assert levels == {KEYS[0]: pytest.approx(0.05 * 3 / 6), **{key: pytest.approx(0.05 / 6) for key in KEYS[1:]}}
    assert sum(levels.values()) == pytest.approx(0.05)  # the union bound still holds at alpha
    assert split.as_json() == {"tasks": 4, "weights": {KEYS[0]: 3.0}, "pooled": {}}
    # a task's own alpha is split by the same share
    assert split.applied(Tolerance(alpha=0.5), KEYS[1]).task_alpha == pytest.approx(0.5 / 6)


def test_an_item_the_session_split_does_not_weigh_is_an_error_not_a_level_outside_alpha():
    """Weights 1 and 1 share alpha in halves; a third item at weight 1 over the same total of 2 would be tested at
    another half, the levels summing to 1.5 alpha. The split refuses it, naming the item; an empty split (none made)
    and per-task control, where the weights are not used, still give the item all of alpha."""
    split = policy().alpha_split({KEYS[0]: None, KEYS[1]: None}, KEYS[:2])
    with pytest.raises(UnweighedItemError, match="bias/stereoset_intra: the session's split of alpha weighs 2"):
        split.applied(Tolerance(alpha=0.05), KEYS[2])
    assert AlphaSplit().applied(Tolerance(alpha=0.05), KEYS[2]).task_alpha == 0.05
    per_task = policy("task").alpha_split({KEYS[0]: None, KEYS[1]: None}, KEYS[:2])
    assert per_task.applied(Tolerance(alpha=0.05), KEYS[2]).task_alpha == 0.05


def test_unweighted_levels_are_the_old_alpha_over_tasks():
    split = policy().alpha_split({key: None for key in KEYS}, KEYS)
    assert [split.applied(Tolerance(alpha=0.05), key).task_alpha for key in KEYS] == [0.05 / 4] * 4
    assert split.as_json() == {"tasks": 4, "weights": {}, "pooled": {}}


def test_the_ini_overrides_the_yaml_and_per_task_control_ignores_both():
    yaml_weights = {KEYS[0]: 3.0, KEYS[1]: None}
    split = policy(bias__crows_pairs_french=2.0).alpha_split(yaml_weights, KEYS)
    assert dict(split.weights) == {KEYS[0]: 3.0, KEYS[1]: 2.0}
    per_task = policy("task", bias__crows_pairs_french=2.0).alpha_split(yaml_weights, KEYS)
    tolerance = per_task.applied(Tolerance(alpha=0.05), KEYS[0])
    assert (tolerance.task_alpha, tolerance.task_count, tolerance.weight) == (0.05, 1, 3.0)


def test_an_ini_weight_for_no_collected_task_is_one_error_naming_it():
    with pytest.raises(GateOptionError, match="modelbench_gate_weights names no collected task or pooled suite: bias/crows_pairs_en "):
        policy(bias__crows_pairs_en=3.0).alpha_split({KEYS[0]: None}, KEYS)
    # deselected (-k) but collected: no error
    assert policy(bias__crows_pairs_french=3.0).alpha_split({KEYS[0]: None}, KEYS).weights == {KEYS[0]: 1.0}
    # a suite this run does not collect keeps its weights (pytest suites/arc_mt with bias weights in the ini)
    assert policy(arc_mt__arc_challenge_mt_fi=3.0).alpha_split({KEYS[0]: None}, KEYS).weights == {KEYS[0]: 1.0}


def test_ini_weight_lines():
    assert checked_weights([f"{KEYS[0]} = 3", f"{KEYS[1]}=0.5"]) == {KEYS[0]: 3.0, KEYS[1]: 0.5}
    bad = {
        f"{KEYS[0]} 3": "must read '<suite>/<task> = <weight>'",
        "crows_pairs_english = 3": "must read '<suite>/<task> = <weight>'",
        f"{KEYS[0]} = 0": r"must lie between 1e-06 and 1e\+06, got 0.0",
        f"{KEYS[0]} = -2": r"must lie between 1e-06 and 1e\+06, got -2.0",
        f"{KEYS[0]} = 1e-300": r"must lie between 1e-06 and 1e\+06, got 1e-300",
        f"{KEYS[0]} = inf": "must be a number",
        f"{KEYS[0]} = nan": "must be a number",
        f"{KEYS[0]} = heavy": "must be a number, got 'heavy'",
    }
    for line, problem in bad.items():
        with pytest.raises(GateOptionError, match=f"^modelbench_gate_weights: .*{problem}"):
            checked_weights([line])
    with pytest.raises(GateOptionError, match="a second weight"):
        checked_weights([f"{KEYS[0]} = 3", f"{KEYS[0]} = 2"])


@pytest.mark.parametrize("value", ["0", "-1", "heavy", "true", ".inf"])
def test_a_bad_yaml_weight_names_the_file_and_the_key(tmp_path, value):
    path = tmp_path / "t.yaml"
    path.write_text(task_yaml("t", "data/t.jsonl") + f"  gate:\n    weight: {value}\n", encoding="utf-8")
    with pytest.raises(TaskConfigError, match=rf"^{path}: key 'modelbench.gate.weight' must"):
        load_task_config(path)


def test_task_and_group_yaml_weights(tmp_path):
    task = tmp_path / "t.yaml"
    task.write_text(task_yaml("t", "data/t.jsonl") + "  gate:\n    weight: 3\n", encoding="utf-8")
    assert load_task_config(task).gate.weight == 3
    group = tmp_path / "g.yaml"
    group.write_text("group: g\ntask: [t]\naggregate_metric_list:\n  - metric: acc\n"
                     "modelbench:\n  gate:\n    weight: 2\n", encoding="utf-8")
    assert load_group_config(group).gate.weight == 2
    group.write_text(group.read_text(encoding="utf-8").replace("weight: 2", "weight: 0"), encoding="utf-8")
    with pytest.raises(TaskConfigError,
                       match=rf"^{group}: key 'modelbench.gate.weight' must lie between 1e-06 and 1e\+06"):
        load_group_config(group)


def test_baselines_keep_the_weights_read_old_ones_as_unweighted_and_stay_comparable():
    weighted = Tolerance(alpha=0.05, task_count=4, weight=3.0, total_weight=6.0)
    record = make_record({"acc": [1, 0, 1]}, tolerance=weighted)
    assert parse(dumps(record), "x.json").tolerance == weighted
    document = json.loads(dumps(record))
    assert (document["gate"]["weight"], document["gate"]["total_weight"]) == (3.0, 6.0)
    old = Tolerance(alpha=0.05, task_count=4)  # a baseline recorded before weights: 1 each, total = task_count
    assert (old.weight, old.total_weight, old.task_alpha) == (1.0, 4.0, 0.05 / 4)
    # the stored tolerance is informative: a baseline recorded under other weights is still compared
    assert comparability_problems(make_record({"acc": [1, 0, 1]}, tolerance=old), record) == []


def compared(task: str, weight: float, total_weight: float, tasks: int = 4) -> GateResult:
    return GateResult(task, STATUS_COMPARED, baseline=f"{task}.json", baseline_name="default", verdict="pass",
                      alpha=0.05, tasks=tasks, weight=weight, total_weight=total_weight)


def test_the_reports_say_how_alpha_is_weighted():
    results = [compared("a", 3, 6), compared("b", 1, 6), compared("c", 1, 6), compared("d", 1, 6)]
    assert error_rate_line(results) == (
        "false blocks: at most 0.05 for the 4 gated task(s) together when nothing regressed past its margin "
        "(0.00833 per task, 0.025 for a; weighted: a 3, others 1)"
    )
    assert [alpha_share(r) for r in results[:2]] == ["0.025 (50%)", "0.00833 (16.7%)"]
    per_task = [compared("a", 3, 3, tasks=1), compared("b", 1, 1, tasks=1)]
    assert "(--gate-error-control=task; the tasks' weights are not used)" in error_rate_line(per_task)
    # carried through the junit properties (xdist workers, run records)
    again = result_from_properties(properties(results[0]))
    assert (again.weight, again.total_weight, again.level) == (3, 6, pytest.approx(0.025))
    old = result_from_properties([("modelbench.gate", json.dumps({
        "task": "a", "status": STATUS_COMPARED, "baseline": "a.json", "baseline_name": "default", "alpha": 0.05,
        "tasks": 4}))])
    assert (old.weight, old.total_weight, old.level) == (1.0, 4.0, 0.05 / 4)


def test_shards_that_split_alpha_by_other_weights_are_not_merged(tmp_path):
    paths = []
    for index, weights in ((1, {KEYS[0]: 3.0}), (2, {})):
        session = {"tasks": {}, "alpha_split": {"tasks": 4, "weights": weights}, "gate": {}, "baselines": "",
                   "options": {}, "packages": {}}
        path = tmp_path / f"shard{index}.json"
        path.write_text(record_text(shard=Shard(index, 2), session=session, tasks={}, exit_status=0, results=[],
                                    evidence={}, outcomes={}, scores=[], custom_tests=[], unused=[], run_config={}),
                        encoding="utf-8")
        paths.append(path)
    with pytest.raises(RunRecordError, match=r"their split of alpha \(the number of tasks sharing it, their weights\) "
                                             r"differ \('weights': \{'bias/crows_pairs_english': 3.0\} vs \{\}\)"):
        merge([read_record(path) for path in paths], session={}, policy=None, store=None,  # type: ignore[arg-type]
              split=None, identities={}, tolerances={})  # refused before the project is read
