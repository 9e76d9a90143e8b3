"""The pytest side of --run-record: write the shard's run record when the session ends.

plugin.py calls `note_session` (pytest_collection_modifyitems, after the gate counted the session's gated items and
before --shard keeps one shard's items, shards.py) and `note_tasks` (after it). `RunRecorder` (registered when
--run-record is given) writes the record when the session ends; `python -m pytest_modelbench merge` judges the
records as one session. The record also holds the model's outputs of every task the run scored (scoring/replay.py),
which `pytest --rescore-from RECORD` (rescoring.py) re-scores without the model.
"""

from __future__ import annotations

import dataclasses
import json
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from pytest_modelbench.gate.rejudge import documents_json
from pytest_modelbench.pytest_plugin import cli_options
from pytest_modelbench.pytest_plugin import gate_hooks as gate
from pytest_modelbench.pytest_plugin.session_identity import session_identity
from pytest_modelbench.pytest_plugin.shards import SHARD_KEY
from pytest_modelbench.pytest_plugin.stash_keys import GATHERED_KEY, RUNNER_KEY
from pytest_modelbench.outputs.results import run_config
from pytest_modelbench.outputs.run_record import record_text
from pytest_modelbench.run.evaluation import TaskEvaluation
from pytest_modelbench.scoring.replay import task_key, task_outputs

RECORDER_KEY = pytest.StashKey["RunRecorder"]()
_WORKER_OUTPUT_KEY = "modelbench_run_record"
_EVIDENCE_ATTRIBUTE = "modelbench_gate_evidence"
_OUTPUTS_ATTRIBUTE = "modelbench_model_outputs"
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2}  # an item's outcome: the worst of its phases'


def add_options(group: Any) -> None:
    group.addoption("--run-record", default=None, metavar="PATH",
                    help="write this run's record (its tasks' verdicts and scores, and the session it belongs to) "
                    "for `python -m pytest_modelbench merge`")


def configure(config: pytest.Config) -> None:
    path = cli_options.output_path("--run-record", config.getoption("--run-record"),
                                   Path(config.invocation_params.dir))
    if path is not None:
        recorder = config.stash[RECORDER_KEY] = RunRecorder(path)
        config.pluginmanager.register(recorder, "modelbench-run-record")


def note_session(config: pytest.Config, items: list[pytest.Item], options: Any) -> None:
    """Under --run-record, note the session this shard belongs to, from the items collected before the split."""
    recorder = config.stash.get(RECORDER_KEY, None)
    if recorder is not None:
        recorder.session = session_identity(config.stash[gate.GATE_KEY], items, options)


def note_tasks(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under --run-record, note the gated tasks this shard runs (the items kept)."""
    recorder = config.stash.get(RECORDER_KEY, None)
    if recorder is not None:
        recorder.tasks = {item.task_id.key: item.nodeid for item in items if gate.is_gated(item)}


class RunRecorder:
    """Writes the run record at the session's end (on the xdist controller, from what the workers collected)."""

    def __init__(self, path: Path):
        self.path = path
        self.session: dict[str, Any] | None = None  # the session's identity (outputs/run_record.py), before the split
        self.tasks: dict[str, str] = {}  # the gated tasks this shard runs: key → node id
        self.outcomes: dict[str, str] = {}  # every item run: node id → passed | failed | skipped
        self.evidence: dict[str, dict[str, Any]] = {}  # node id → its evidence (gate_hooks.py)
        # the model's outputs of every task scored, for --rescore-from (scoring/replay.py): task key → its variants
        self.outputs: dict[str, list[dict[str, Any]]] = {}
        self.backend: dict[str, Any] | None = None  # the backend that gave them, as it describes itself
        self._reported = 0  # how many of this process's evaluations (runner.evaluations, in order) were reported

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        report = yield
        evidence = item.stash.get(gate.EVIDENCE_KEY, None)
        if call.when == "call" and evidence is not None:
            documents = evidence["documents"]
            evidence = {"candidate": evidence["candidate"], "clusters": evidence["clusters"],
                        "documents": None if documents is None else documents_json(documents)}
            # pytest-xdist sends it to the controller with the report
            setattr(report, _EVIDENCE_ATTRIBUTE, json.dumps(evidence, ensure_ascii=False))
        outputs = self._new_outputs(item)
        if outputs is not None:
            setattr(report, _OUTPUTS_ATTRIBUTE, json.dumps(outputs, ensure_ascii=False))
        return report

    def _new_outputs(self, item: pytest.Item) -> dict[str, Any] | None:
        """The model's outputs of the tasks scored since the last report (a task's first evaluation stands, as in
        results_gathering.py), with the backend's description; None when there are none."""
        runner = item.config.stash[RUNNER_KEY]
        evaluations = runner.evaluations
        new = list(islice(reversed(evaluations.values()), len(evaluations) - self._reported))[::-1]
        self._reported = len(evaluations)
        scored = [e for e in new if isinstance(e, TaskEvaluation)]  # a group's leaves are there on their own
        if not scored:
            return None
        root = item.config.rootpath
        return {"backend": dataclasses.asdict(runner.backend().describe()),
                "tasks": [[task_key(e.prepared.config, root), task_outputs(
                    e.prepared, e.loglikelihoods, e.generations, e.greedy,
                    [] if e.integrity is None else [(u.doc_id, u.problem) for u in e.integrity.unscored])]
                    for e in scored]}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        before = self.outcomes.get(report.nodeid, "passed")
        self.outcomes[report.nodeid] = max(before, report.outcome, key=_OUTCOME_RANK.__getitem__)
        text = getattr(report, _EVIDENCE_ATTRIBUTE, None)
        if text is not None:
            self.evidence[report.nodeid] = json.loads(text)
        text = getattr(report, _OUTPUTS_ATTRIBUTE, None)
        if text is not None:
            outputs = json.loads(text)
            self.backend = outputs["backend"]
            for key, variant in outputs["tasks"]:
                variants = self.outputs.setdefault(key, [])
                if variant not in variants:  # one task scored by two workers, or by a task and a group
                    variants.append(variant)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = (getattr(node, "workeroutput", None) or {}).get(_WORKER_OUTPUT_KEY)
        if output is not None:  # every worker collected the same items
            self.session, self.tasks = output["session"], output["tasks"]

    @pytest.hookimpl(trylast=True)  # after the gate's own session finish (unused baselines, exit status)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = session.config
        if hasattr(config, "workerinput"):
            config.workeroutput[_WORKER_OUTPUT_KEY] = {"session": self.session, "tasks": self.tasks}  # type: ignore[attr-defined]
            return
        if self.session is None:  # collection failed: no session to record
            return
        shard = config.stash[SHARD_KEY]
        if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and shard.count > 1:
            session.exitstatus = pytest.ExitCode.OK  # an empty shard of a split session ran all it had
        gate_session = config.stash[gate.GATE_KEY]
        decision = gate_session.decision
        text = record_text(
            shard=shard, session=self.session, tasks=self.tasks, exit_status=int(session.exitstatus),
            results=decision.results, evidence=self.evidence, outcomes=self.outcomes,
            scores=config.stash[GATHERED_KEY].tasks(),
            custom_tests=decision.custom_tests, unused=[gate_session.store.display(p) for p in decision.unused],
            run_config=run_config(config.stash[RUNNER_KEY].options),
            outputs=None if self.backend is None else {"backend": self.backend, "tasks": self.outputs},
        )
        cli_options.write_output(session, "--run-record", self.path, text)

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if hasattr(config, "workerinput") or self.session is None:
            return
        shard = config.stash[SHARD_KEY]
        terminalreporter.write_line(
            f"modelbench: shard {shard.label} ran {len(self.tasks)} of {len(self.session['tasks'])} gated task(s); "
            f"run record: {self.path}"
        )
