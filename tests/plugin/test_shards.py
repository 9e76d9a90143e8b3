"""A session run as shards (separate processes, separate score caches) and merged gives one process's verdict."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from pytest_modelbench.__main__ import EXIT_REFUSED, main
from pytest_modelbench.outputs.record_integrity import sealed
from pytest_modelbench.outputs.run_record import FORMAT
from pytest_modelbench.run.sharding import ShardError, Unit, assign, join_units, parse_shard
from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    _one_torch_thread,
    bad_model,
    make_project,
    probe_docs,
    run_gate,
)

TASKS = tuple(f"gate_probe_{i}" for i in range(6))
SHARDS = 4


def run_shards(pytester, model, label: str) -> list:
    """The session's four shards, each a process of its own with its own score cache, run side by side."""
    records = [pytester.path / f"{label}-shard-{k}.json" for k in range(1, SHARDS + 1)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    processes = []
    for k, record in enumerate(records, start=1):
        env_k = dict(env, MODELBENCH_CACHE_DIR=str(pytester.path / f"cache-{label}-{k}"))
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "pytest", f"--model={model}", "-p", "no:cacheprovider", "-q",
             f"--shard={k}/{SHARDS}", f"--run-record={record}"],
            cwd=pytester.path, env=env_k, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    for output, process in zip(outputs, processes):
        assert process.returncode in (0, 1), output
    ran = [json.loads(record.read_text())["tasks"] for record in records]
    assert sorted(task for tasks in ran for task in tasks) == [f"probe/{t}" for t in TASKS]
    assert all(ran), "every shard ran a task: the split is balanced"
    return records


def test_four_shards_merged_give_the_verdicts_of_one_process(pytester, tiny_model, bad_model, probe_docs,
                                                             monkeypatch, capsys):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache-one"))
    make_project(pytester, probe_docs, tasks=TASKS, metrics=("acc", "acc_norm"))
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=6)

    for model, label, exit_status in ((tiny_model, "pass", 0), (bad_model, "regressed", 1)):
        one = pytester.path / f"{label}-one.json"
        single = run_gate(pytester, model, f"--results-json={one}")
        assert single.ret == exit_status
        records = run_shards(pytester, model, label)
        merged = pytester.path / f"{label}-merged.json"
        assert main(["merge", *map(str, records), f"--results-json={merged}"]) == exit_status
        # the results JSON holds no timing field: the merged one is the one process's, byte for byte
        assert merged.read_text() == one.read_text()
        verdicts = {task: outcome["status"] for task, outcome in json.loads(merged.read_text())["gate"].items()}
        assert set(verdicts.values()) == ({"pass"} if label == "pass" else {"regressed"})
        assert "false blocks: at most 0.05 for the 6 gated task(s) together" in capsys.readouterr().out
    passing = [pytester.path / f"pass-shard-{k}.json" for k in range(1, SHARDS + 1)]
    regressed_4 = pytester.path / f"regressed-shard-{SHARDS}.json"

    def refusal(*records) -> str:
        assert main(["merge", *map(str, records)]) == EXIT_REFUSED
        return capsys.readouterr().err

    assert "shard 3/4 missing: a verdict needs every shard" in refusal(*passing[:2], passing[3])
    copy = pytester.path / "copy-of-shard-2.json"
    shutil.copy(passing[1], copy)
    message = refusal(*passing, copy)
    assert "shard 2/4 is given 2 times" in message and str(copy) in message and str(passing[1]) in message
    message = refusal(*passing[:3], regressed_4)
    assert "the shards scored different checkpoints" in message and str(regressed_4) in message


def test_the_split_depends_on_cost_and_keeps_shared_tasks_together():
    units = join_units(
        [("big", ["a"]), ("group", ["b", "c"]), ("task_of_group", ["c"]), ("small", ["d"]), ("custom", [])],
        {"a": 100.0, "b": 10.0, "c": 10.0, "d": None},  # d's data is not a local file: the mean of the others
    )
    assert sorted(units, key=lambda u: u.names) == sorted([
        Unit(("big",), 100.0), Unit(("group", "task_of_group"), 20.0), Unit(("small",), 40.0), Unit(("custom",), 0.0),
    ], key=lambda u: u.names)
    assert assign(units, 2) == {"big": 1, "small": 2, "group": 2, "task_of_group": 2, "custom": 2}
    assert assign(units, 1) == dict.fromkeys(("big", "small", "group", "task_of_group", "custom"), 1)


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/b", "2/0"])
def test_a_shard_is_k_of_n(text):
    with pytest.raises(ShardError, match="--shard must be K/N"):
        parse_shard(text)


def _document(**changes) -> dict:
    """A well-formed run record's fields (one shard of two, nothing run), with `changes`."""
    session = dict.fromkeys(("tasks", "alpha_split", "gate", "options", "packages"), {}) | {"baselines": "b"}
    document = {"format": FORMAT, "shard": {"index": 1, "count": 2}, "session_id": "s", "session": session,
                "tasks": {}, "items": {}, "exit_status": 0, "results": [], "scores": [], "custom_tests": [],
                "unused": [], "run_config": {}}
    return document | changes


def _sealed(**changes) -> str:
    return json.dumps(sealed(_document(**changes), None))


def _nested(depth: int) -> str:
    return '{"format": "' + FORMAT + '", "run_config": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize(("text", "problem"), [
    ("{not json", "not a readable run record: it is not JSON"),
    ("[" * 100_000 + "]" * 100_000, "not a readable run record: it is nested more than 32 levels deep"),
    (_nested(40), "not a readable run record: it is nested more than 32 levels deep"),
    ('{"format": "pytest-modelbench-run-record/0"}', "not a run record of this version"),
    (json.dumps(_document()), "it has no digest"),
    (_sealed(session=None) , "run record is malformed: key 'session' must be an object, not NoneType"),
    (json.dumps({k: v for k, v in sealed(_document(), None).items() if k != "items"}),
     "its content does not match its digest"),
    (json.dumps(sealed({k: v for k, v in _document().items() if k != "items"}, None)),
     "run record is malformed: key 'items' is missing"),
    (_sealed(shard={"index": "1", "count": 2}), "key 'shard.index' must be an integer, not str"),
    (_sealed(shard={"index": 1, "count": 10**12}), "key 'shard' must be K of N with 1 <= K <= N <= 10000"),
    (_sealed(items={"t.yaml::t": "won"}), "key items['t.yaml::t'] must be one of passed, failed, skipped"),
    (_sealed(results=[{"nodeid": "t", "failed": False, "properties": [["modelbench.gate", "{"]]}]),
     "key 'results[0].properties' is not a gate result (JSONDecodeError"),
    (_sealed(scores=[{"key": "s/t", "rows": [[1.5]]}]), "key 'scores[0].rows' must hold rows of strings"),
])
def test_a_bad_record_is_one_line_naming_it(tmp_path, capsys, text, problem):
    record = tmp_path / "shard-1.json"
    record.write_text(text)
    assert main(["merge", str(record)]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"refused: {record}: " in err and problem in err, err
    assert main(["merge", str(tmp_path / "gone.json")]) == EXIT_REFUSED
    assert "no such run record" in capsys.readouterr().err
