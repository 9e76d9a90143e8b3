"""Faults during real runs, in real processes: kill -9 and Ctrl-C during --snapshot-update, SIGTERM in the middle of a
gated run, and two pytest processes sharing one score cache and one baselines folder."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from pytest_modelbench.gate.baseline_file import parse
from pytest_modelbench.gate.decision import EXIT_STATUS_INTERRUPTED
from tests.fixtures.gate_tasks import pool_documents, write_task
from tests.plugin.gate_project import _one_torch_thread  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[2]
TASKS = tuple(f"fault_probe_{i}" for i in range(4))
DOCS = 200


@pytest.fixture
def project(pytester, monkeypatch) -> Path:
    """Four two-choice tasks in suites/probe, and a score cache of their own."""
    for i, task in enumerate(TASKS):
        write_task(pytester.path / "suites" / "probe", task, pool_documents(DOCS, seed=i))
    pytester.makeini("[pytest]\nmodelbench_suites = suites\n")
    monkeypatch.setenv("MODELBENCH_CACHE_DIR", str(pytester.path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return pytester.path


def baselines(root: Path) -> Path:
    return root / "baselines" / "default" / "probe"


def start_pytest(root: Path, model: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    # Batch size 1 (one prompt per server request): the run lasts long enough to be interrupted in the middle of a task.
    command = [sys.executable, "-m", "pytest", f"--model={model}", "--batch-size=1", "-p", "no:cacheprovider", "-v",
               *args]
    return subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_interruptible)


def _interruptible() -> None:
    """In the child before exec: Ctrl-C as a user's shell gives it, whatever the process running this test holds. An
    ignored or blocked SIGINT survives exec (twice in clean-clone CI runs under xdist the interrupted run went on past
    two SIGINTs; with SIGINT ignored in the test's own process, this test fails without this reset)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def wait_for(condition, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"pytest ended before the moment to interrupt it:\n{process.stdout.read()}"
        assert time.monotonic() < deadline, "timed out waiting for the run to reach the moment to interrupt it"
        time.sleep(0.01)


def cache_rows(root: Path) -> int:
    with closing(sqlite3.connect(root / "cache" / "scores.sqlite")) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return connection.execute("SELECT COUNT(*) FROM scores").fetchone()[0]


def scores_cached_yet(root: Path) -> bool:
    """Whether the running pytest has written scores to its cache (which it creates, then fills, as we look)."""
    try:
        return (root / "cache" / "scores.sqlite").exists() and cache_rows(root) > 0
    except sqlite3.OperationalError:  # created, its table not yet
        return False


def no_temporary_files(folder: Path) -> bool:
    return not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_kill_9_during_snapshot_update_leaves_each_baseline_old_or_new(project, pytester, tiny_model):
    pytester.runpytest(f"--model={tiny_model}", "-p", "no:cacheprovider", "--limit=30",
                       "--snapshot-update").assert_outcomes(passed=len(TASKS))
    old = {path.name: path.read_text() for path in baselines(project).iterdir()}
    assert len(old) == len(TASKS)

    # without --limit every baseline is out of date: the run rewrites them one by one, and is killed in between
    process = start_pytest(project, tiny_model, "--snapshot-update")
    wait_for(lambda: any(path.read_text() != old[path.name] for path in baselines(project).glob("*.json")), process)
    time.sleep(random.Random(9).uniform(0, 0.5))
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)

    fates = []
    for path in sorted(baselines(project).glob("*.json")):
        record = parse(path.read_text(), path)  # complete and valid, whichever it is
        fates.append("old" if path.read_text() == old[path.name] else "new")
        assert record.provenance.limit == (30 if fates[-1] == "old" else None)
    assert len(fates) == len(TASKS) and "old" in fates and "new" in fates  # killed mid-run
    assert cache_rows(project) > 0  # the cache survives a kill in the middle of its writes


def test_ctrl_c_keeps_the_cache_and_writes_no_partial_baseline(project, tiny_model):
    # After each task the run marks it and pauses: the signal lands in that pause, whatever the load (polling for the
    # first cached scores alone let a loaded run end all four tasks before the signal arrived).
    (project / "conftest.py").write_text("import pathlib\nimport time\n\n\ndef pytest_runtest_logfinish(nodeid, location):\n"
                                         "    pathlib.Path('task_done').touch()\n    time.sleep(60)\n")
    process = start_pytest(project, tiny_model, "--snapshot-update")
    wait_for(lambda: (project / "task_done").exists() and scores_cached_yet(project), process)
    process.send_signal(signal.SIGINT)
    try:
        output = process.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        # Seen once in a clean-clone CI run at load 3 with xdist (not reproduced alone): the run went on to the next
        # task instead of stopping. A user presses Ctrl-C again; so does the test, and the checks below still hold.
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=120)[0]

    # the interrupted status (gate/decision.py); rarely pytest's own report of where the interrupt landed crashes (a
    # frame without a line number, inside pytest), which exits 1: either way the run stops, and the checks below are
    # what matter.
    assert process.returncode in (EXIT_STATUS_INTERRUPTED, pytest.ExitCode.TESTS_FAILED), output
    assert "KeyboardInterrupt" in output
    passed = {task for task in TASKS if f"::{task} PASSED" in output}
    written = {path.stem for path in baselines(project).glob("*.json")}
    # A task whose baseline was written just before the signal may not have printed PASSED yet; every baseline
    # that exists must still be a whole one, and the interrupted run must not have written them all.
    assert passed <= written and len(written) < len(TASKS), output
    for task in written:
        record = parse((baselines(project) / f"{task}.json").read_text(), task)
        assert record.provenance.limit is None and len(record.doc_keys) == DOCS
    assert not baselines(project).is_dir() or no_temporary_files(baselines(project))
    assert cache_rows(project) >= len(written) * DOCS * 2  # two choices per document


def test_two_pytest_processes_share_one_cache_and_one_baselines_folder(project, tiny_model):
    # two xdist workers sharing them: tests/plugin/test_gate_xdist.py
    processes = [start_pytest(project, tiny_model, "--snapshot-update") for _ in range(2)]
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
        assert "score cache" not in output  # no cache warning: no lock or write was given up on
    for task in TASKS:
        assert parse((baselines(project) / f"{task}.json").read_text(), task).task == task
    assert no_temporary_files(baselines(project))
    # every distinct request is in the cache once, whichever process scored it
    requests = {(i, doc["text"], option) for i in range(len(TASKS)) for doc in pool_documents(DOCS, seed=i)
                for option in doc["options"]}
    assert cache_rows(project) == len({(text, option) for _, text, option in requests})


SECOND_TASK_PAUSES_HALFWAY = """import pathlib
import time

from pytest_modelbench.scoring import cached

add = cached.WriteBack.add
scored_in_task = []


def pytest_runtest_logstart(nodeid, location):
    scored_in_task.clear()
    scored_in_task.append(nodeid.endswith('{task}'))


def add_then_pause_halfway(self, items):
    add(self, items)
    if scored_in_task[0]:
        scored_in_task.extend(items)
        if len(scored_in_task) > {halfway}:
            self.close()
            pathlib.Path('halfway').touch()
            time.sleep(60)


cached.WriteBack.add = add_then_pause_halfway
"""


def test_sigterm_in_the_second_task_ends_interrupted_with_the_first_verdict_and_the_rerun_scores_the_rest(
        project, pytester, tiny_model):
    """Issue 50: SIGTERM (a CI job cancelled) in the middle of the second task: within seconds the run exits with the
    interrupted status, its results JSON says `interrupted` and which tasks were not judged, the first task's verdict
    is kept, and the re-run scores only what was left."""
    pytester.runpytest(f"--model={tiny_model}", "-p", "no:cacheprovider", "--snapshot-update",
                       "--no-cache").assert_outcomes(passed=len(TASKS))
    # Halfway through the second task the run writes what it scored to the cache, marks the moment and pauses: the
    # signal lands inside the task whatever the load (polling for the task's start let a loaded CI run finish the
    # second task before the signal arrived).
    (project / "conftest.py").write_text(SECOND_TASK_PAUSES_HALFWAY.format(task=TASKS[1], halfway=DOCS))
    process = start_pytest(project, tiny_model, "--results-json=r.json")
    wait_for(lambda: (project / "halfway").exists(), process)
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=60)[0]
    stopped_after = time.monotonic() - signalled

    assert process.returncode == EXIT_STATUS_INTERRUPTED, output
    assert stopped_after < 30, stopped_after  # promptly: the task is stopped where it is, not finished
    document = json.loads((project / "r.json").read_text())
    assert document["outcome"]["status"] == "interrupted"
    assert document["outcome"]["unfinished"] == [f"probe/{task}" for task in TASKS[1:]]
    assert document["outcome"]["exit_status"] == EXIT_STATUS_INTERRUPTED
    assert {task: outcome["status"] for task, outcome in document["gate"].items()} == {f"probe/{TASKS[0]}": "pass"}
    assert "gate interrupted: SIGTERM stopped the session before 3 gated task(s) were judged" in output
    cached = cache_rows(project)
    assert DOCS * 2 < cached < len(TASKS) * DOCS * 2
    before_rerun = latest_write(project)

    (project / "conftest.py").unlink()
    rerun = start_pytest(project, tiny_model)
    output = rerun.communicate(timeout=600)[0]
    assert rerun.returncode == 0, output
    assert cache_rows(project) == len(TASKS) * DOCS * 2
    assert rows_written_after(project, before_rerun) == len(TASKS) * DOCS * 2 - cached  # none scored again


def latest_write(root: Path) -> float:
    with closing(sqlite3.connect(root / "cache" / "scores.sqlite")) as connection:
        return connection.execute("SELECT MAX(created) FROM scores").fetchone()[0]


def rows_written_after(root: Path, moment: float) -> int:
    with closing(sqlite3.connect(root / "cache" / "scores.sqlite")) as connection:
        return connection.execute("SELECT COUNT(*) FROM scores WHERE created > ?", (moment,)).fetchone()[0]
