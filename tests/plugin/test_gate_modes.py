"""The gate's modes through the real pytest wiring (docs/gate-modes.md): generated scenarios
(tests/fixtures/gate_scenarios.py) gated by the toy backend of their answer files in every mode the plugin has, each
mode's results JSON compared with the plain run's. The same scenarios run in process (tests/fixtures/gate_modes.py,
tests/unit/test_gate_modes.py) must decide what pytest decides, so the fast tier's hundreds of in-process scenarios
speak for the wiring too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_modelbench.__main__ import main
from tests.fixtures.gate_modes import prepared_once, run_session, Mode
from tests.fixtures.gate_scenarios import BACKEND_SPEC, scenario, write_project
from tests.fixtures.mode_invariants import INVALID_NOTE

REPO = Path(__file__).resolve().parents[2]
# Seeds whose scenarios cover what the modes must agree on (checked by test_the_chosen_scenarios_cover_the_features):
# a pooled entry, unscored documents, repeated documents, a generation task with unparseable answers, a regression;
# 37: a pooled entry regressed beside a task in `error`; 63: invalid_output regressed in one category, and tasks
# that --early-stop stops.
SEEDS = (0, 37, 63, 77, 261)
REGRESSED = 37  # -n 2 with and without --early-stop (EarlyStop's "task": each task keeps documents for the pool)


def gate(pytester, model: Path, *args: str, results: str | None = None) -> tuple[int, dict[str, Any] | None]:
    """One run of the project's suite: its exit status and results JSON (when asked for)."""
    path = pytester.path / results if results else None
    extra = (f"--results-json={path}",) if path else ()
    outcome = pytester.runpytest(f"--model={model}", f"--backend={BACKEND_SPEC}", "-p", "no:cacheprovider",
                                 *extra, *args)
    return int(outcome.ret), json.loads(path.read_text()) if path else None


def decided(exit_status: int, document: dict[str, Any]) -> dict[str, Any]:
    """What a results JSON says the gate decided: the exit status, each task's outcome, documents, unscored keys,
    entry verdicts and standard errors (clusters count in them) and invalid-output note, and the pooled entries'
    verdicts."""
    tasks = {key: (task["status"], task.get("n_documents"),
                   tuple((task.get("integrity") or {}).get("unscored_keys", ())),
                   sorted((e["metric"], e.get("category") or "", e["verdict"], round(e["standard_error"], 9))
                          for e in task.get("entries", ())),
                   [said.group(0) for said in INVALID_NOTE.finditer(task.get("note") or "")])
             for key, task in document["gate"].items()}
    pooled = sorted((entry["metric"], entry["verdict"]) for entry in document.get("pooled", ()))
    return {"exit": exit_status, "tasks": tasks, "pooled": pooled}


@pytest.fixture
def project(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return pytester


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mode_decides_what_the_plain_run_decides(project, seed, tmp_path):
    case = scenario(seed)
    models = write_project(project.path, case)
    assert gate(project, models["baseline"], "--snapshot-update")[0] == 0, case.describe()
    candidate = models["candidate"]
    record = project.path / "plain-record.json"
    status, document = gate(project, candidate, "--no-cache", f"--run-record={record}", results="plain.json")
    plain = decided(status, document)

    # the in-process driver of the fast tier decides what the wiring decides
    with prepared_once():
        view = run_session(project.path, candidate, Mode("plain"))
    assert view.exit_status == plain["exit"], case.describe()
    assert {key: (task.status, task.n_documents, task.unscored_keys) for key, task in view.tasks.items()} == {
        key: task[:3] for key, task in plain["tasks"].items()}, case.describe()

    modes = {
        "cold cache": ("--results-json=cold.json",),
        "warm cache": ("--results-json=warm.json",),
        "rescore": (f"--rescore-from={record}", "--results-json=rescored.json"),
        "update new only": ("--no-cache", "--snapshot-update-new-only", "--results-json=new-only.json"),
    }
    # a warm cache answers a timed-out copy of a repeated document from its twin's cached value (mode_invariants.py)
    transient = any(isinstance(answer, dict) for answer in case.candidate.values())
    for name, args in modes.items():
        status, _ = gate(project, candidate, *args)
        document = json.loads((project.path / args[-1].split("=", 1)[1]).read_text())
        if not (name == "warm cache" and transient):
            assert decided(status, document) == plain, f"{name}: {case.describe()}"

    records = [project.path / f"shard-{k}.json" for k in (1, 2)]
    for k, shard_record in enumerate(records, start=1):
        gate(project, candidate, "--no-cache", f"--shard={k}/2", f"--run-record={shard_record}")
    merged_json = project.path / "merged.json"
    status = main(["merge", *map(str, records), f"--results-json={merged_json}"])
    assert decided(status, json.loads(merged_json.read_text())) == plain, f"merge: {case.describe()}"

    status, document = gate(project, candidate, "--early-stop", results="early.json")
    if plain["exit"] == 1:
        assert status in (1, 7), f"early stop passed what the plain run blocks: {case.describe()}"


def test_the_chosen_scenarios_cover_the_features():
    cases = [scenario(seed) for seed in SEEDS]
    tasks = [task for case in cases for task in case.tasks]
    assert any(len(case.tasks) > 1 for case in cases)  # a pooled family
    assert any(answer is None for case in cases for answer in case.candidate.values())  # unscored documents
    assert any(len({d["q"] for d in task.documents}) < len(task.documents) for task in tasks)  # repeated documents
    assert any(answer == "no idea" for case in cases for answer in case.candidate.values())  # unparseable answers
    assert {task.output_type for task in tasks} == {"multiple_choice", "generate_until", "loglikelihood"}


def test_two_workers_decide_what_one_process_decides(project, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the workers import the toy backend from tests.fixtures
    case = scenario(REGRESSED)
    models = write_project(project.path, case)
    assert gate(project, models["baseline"], "--snapshot-update")[0] == 0
    one = decided(*gate(project, models["candidate"], "--no-cache", results="one.json"))
    assert one["exit"] == 1 and ("exact_match,strict", "regressed") in one["pooled"], case.describe()

    def workers(*args: str) -> int:
        return int(project.runpytest_subprocess(f"--model={models['candidate']}", f"--backend={BACKEND_SPEC}",
                                                "-p", "no:cacheprovider", "-n", "2", "--no-cache", *args).ret)

    two = decided(workers(f"--results-json={project.path / 'two.json'}"),
                  json.loads((project.path / "two.json").read_text()))
    assert two == one, case.describe()
    assert workers("--early-stop") == 1, case.describe()  # the pooled regression is not passed early
