"""A merge recomputes, never trusts: shards that scored nothing, records edited by hand (with or without a new
digest), unsigned or wrongly signed records under MODELBENCH_RECORD_KEY and records judged under another gate policy
are refused naming the record; a verdict edited and sealed again is recomputed from the evidence.

Two tasks, two shards, in-process runs sharing one score cache: the tasks are scored once by the baseline run and
once by the candidate."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from pytest_modelbench.__main__ import EXIT_REFUSED, main
from pytest_modelbench.gate.baseline_file import dumps, parse_or_problem
from pytest_modelbench.outputs.record_integrity import KEY_ENV, sealed
from tests.plugin.gate_project import (  # noqa: F401 - fixtures
    SUITE,
    _one_torch_thread,
    bad_model,
    make_project,
    probe_docs,
    run_gate,
)

TASKS = ("gate_probe_a", "gate_probe_b")


@pytest.fixture
def project(pytester, tiny_model, probe_docs, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "merge-evidence-cache"))
    monkeypatch.delenv(KEY_ENV, raising=False)
    make_project(pytester, probe_docs, tasks=TASKS, metrics=("acc", "f1"))  # f1: aggregated over the documents
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=2)
    return pytester


def shards(pytester, label: str, *args: str) -> list:
    """Shards 1/2 and 2/2 run with `args`, and their records."""
    records = [pytester.path / f"{label}-{k}.json" for k in (1, 2)]
    for k, record in enumerate(records, start=1):
        result = pytester.runpytest("-p", "no:cacheprovider", f"--shard={k}/2", f"--run-record={record}", *args)
        assert result.ret in (0, 1), result.stdout.str()
    return records


def refused(capsys, *args) -> str:
    assert main(["merge", *map(str, args)]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert err.startswith("modelbench merge: refused: ") and err.count("\n") == 1, err
    return err


def edit(path, change, *, key: bytes | None = None, seal: bool = False) -> None:
    """Change the record's JSON by hand; `seal`: write a digest (and with `key` a signature) for the new content."""
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(sealed(document, key) if seal else document, indent=2))


def test_shards_that_scored_nothing_are_refused(project, tiny_model, capsys):
    collect_only = shards(project, "collect", f"--model={tiny_model}", "--collect-only")
    message = refused(capsys, *collect_only)
    assert "ran none of its 1 gated task(s) (a --collect-only run?)" in message
    assert str(collect_only[0]) in message

    no_model = shards(project, "nomodel")  # the task items are skipped: no --model
    message = refused(capsys, *no_model)
    assert "scored none of its 1 gated task(s): they were skipped (no --model?)" in message
    assert str(no_model[0]) in message

    scored = shards(project, "scored", f"--model={tiny_model}")
    assert main(["merge", *map(str, scored)]) == 0
    message = refused(capsys, scored[0], no_model[1])  # one shard scored, the other did not
    assert "scored none" in message and str(no_model[1]) in message


def _regressed_result(document) -> dict:
    return next(r for r in document["results"] if '"verdict": "regressed"' in r["properties"][0][1])


def _as_passed(document) -> None:
    """The edit a hand would make to pass a regressed task: its verdict, its entries, its failure, the exit status."""
    result = _regressed_result(document)
    result["properties"] = [[name, value.replace('"regressed"', '"pass"')] for name, value in result["properties"]]
    result["failed"] = False
    document["items"] = dict.fromkeys(document["items"], "passed")
    document["exit_status"] = 0


def test_a_record_edited_by_hand_is_refused_or_recomputed(project, bad_model, capsys, monkeypatch):
    records = shards(project, "bad", f"--model={bad_model}")
    assert main(["merge", *map(str, records), f"--results-json={project.path / 'merged.json'}"]) == 1
    one_process = project.path / "one.json"
    assert run_gate(project, bad_model, f"--results-json={one_process}").ret == 1
    assert (project.path / "merged.json").read_text() == one_process.read_text()  # f1's entries recomputed too
    gate = json.loads(one_process.read_text())["gate"]
    assert {task: outcome["status"] for task, outcome in gate.items()} == {f"{SUITE}/{t}": "regressed" for t in TASKS}
    assert {entry["metric"] for entry in gate[f"{SUITE}/{TASKS[0]}"]["entries"]} == {"acc", "f1"}
    regressed = records[0]  # each shard holds one of the two regressed tasks
    original = regressed.read_text()

    def number(document):
        entry = next(pair for pair in _regressed_result(document)["properties"] if '"p_value"' in pair[1])
        entry[1] = entry[1].replace('"p_value": ', '"p_value": 0.5, "was": ')

    def exit_status(document):
        document["exit_status"] = 0

    for change in (_as_passed, exit_status, number):
        edit(regressed, change)
        message = refused(capsys, *records)
        assert f"{regressed}: its content does not match its digest" in message
        regressed.write_text(original)

    # Edited and sealed again (a digest anyone can compute): the verdicts are recomputed from the evidence.
    edit(regressed, _as_passed, seal=True)
    assert main(["merge", *map(str, records), f"--results-json={project.path / 'again.json'}"]) == 1
    assert (project.path / "again.json").read_text() == (project.path / "merged.json").read_text()

    def other_gold(document):  # f1's documents, which the record carries beside the candidate record
        first = document["results"][0]["documents"][0]
        first[4] = 1 - first[4]
    edit(regressed, other_gold, seal=True)
    assert "its documents are not the ones its candidate record scored" in refused(capsys, *records)
    regressed.write_text(original)

    # With a key, only the shards' signature counts.
    key = b"the shards' secret"
    monkeypatch.setenv(KEY_ENV, key.decode())
    message = refused(capsys, *records)
    assert str(records[0]) in message and f"it is not signed, and {KEY_ENV} is set" in message
    regressed.write_text(original)
    for record in records:
        edit(record, lambda document: None, key=key, seal=True)
    assert main(["merge", *map(str, records)]) == 1
    signed = regressed.read_text()
    edit(regressed, _as_passed, seal=True)  # a new digest, the old signature
    assert f"{regressed}: its signature does not match {KEY_ENV}" in refused(capsys, *records)
    regressed.write_text(signed)
    monkeypatch.setenv(KEY_ENV, "another key")
    assert f"{records[0]}: its signature does not match" in refused(capsys, *records)
    monkeypatch.delenv(KEY_ENV)
    assert f"it is signed, but {KEY_ENV} is not set here" in refused(capsys, *records)


def test_the_merge_judges_with_its_own_gate_policy(project, tiny_model, capsys):
    loose = shards(project, "loose", f"--model={tiny_model}", "--gate-alpha=0.5")
    message = refused(capsys, *loose)
    assert "their gate settings differ from this checkout's ('overrides'" in message and str(loose[0]) in message
    assert main(["merge", *map(str, loose), "--", "--gate-alpha=0.5"]) == 0

    records = shards(project, "plain", f"--model={tiny_model}")
    original = records[0].read_text()

    def widened(document):  # the candidate's own margin, as a shard run from a looser checkout would record it
        result = document["results"][0]
        candidate, _ = parse_or_problem(result["candidate"])
        tolerance = dataclasses.replace(candidate.tolerance, absolute_margin=0.5, metric_margins={})
        result["candidate"] = dumps(dataclasses.replace(candidate, tolerance=tolerance))
    edit(records[0], widened, seal=True)
    message = refused(capsys, *records)
    assert str(records[0]) in message and "was judged under other gate settings than this project's" in message

    records[0].write_text(original)
    task_yaml = project.path / "suites" / SUITE / f"{TASKS[0]}.yaml"
    task_yaml.write_text(task_yaml.read_text() + "  gate:\n    absolute_margin: 0.2\n")  # this checkout's margin
    message = refused(capsys, *records)
    assert "was judged under other gate settings than this project's" in message


def test_groups_merge_as_one_process(pytester, tiny_model, bad_model, probe_docs, monkeypatch):
    """A group item's tolerance (its YAML's gate block, margins of its aggregates) is derived by the merge as the
    shard's gate gave it: the merged results are the one process's, byte for byte."""
    from tests.plugin.test_gate_group import make_group_project

    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    make_group_project(pytester, probe_docs)
    run_gate(pytester, tiny_model, "--snapshot-update").assert_outcomes(passed=6)  # 3 groups, 3 tasks
    one_process = pytester.path / "one.json"
    assert run_gate(pytester, bad_model, f"--results-json={one_process}").ret == 1
    records = shards(pytester, "group", f"--model={bad_model}")
    merged = pytester.path / "merged.json"
    assert main(["merge", *map(str, records), f"--results-json={merged}"]) == 1
    assert merged.read_text() == one_process.read_text()
    assert json.loads(merged.read_text())["gate"][f"{SUITE}/probe_all"]["status"] == "regressed"


def test_a_merge_in_a_checkout_whose_policy_is_not_the_refs_is_refused(project, tiny_model, capsys):
    """Shards judged against --baseline-ref merge only in a checkout whose gate policy is the ref's: a margin widened
    in the merging checkout is named, not applied."""
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "baselines and their gate policy")):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=project.path, check=True,
                       capture_output=True)
    records = shards(project, "ref", f"--model={tiny_model}", "--baseline-ref=HEAD")
    assert main(["merge", *map(str, records), "--", "--baseline-ref=HEAD"]) == 0
    task = project.path / "suites" / SUITE / f"{TASKS[0]}.yaml"
    task.write_text(task.read_text() + "  gate:\n    metrics:\n      acc:\n        absolute_margin: 1.0\n")
    message = refused(capsys, *records, "--", "--baseline-ref=HEAD")
    assert "this checkout's gate policy is not the one at --baseline-ref: " in message
    assert f"{SUITE}/{TASKS[0]}: margin acc 0.01 → 1" in message
