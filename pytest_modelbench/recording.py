"""The pytest side of --shard and --run-record: keep one shard's items, and write the shard's run record.

`select_shard` runs after pytest's own -k/-m selection (plugin.py, pytest_collection_modifyitems, trylast): the gate
counts the session's gated items first, so every shard splits alpha over the whole session, then the items of the
other shards are deselected (sharding.py decides which). `RunRecorder` (registered when --run-record is given)
writes the record when the session ends; `python -m pytest_modelbench merge` judges the records as one session.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_modelbench import cli_options
from pytest_modelbench.gate import pytest_integration as gate
from pytest_modelbench.gate.provenance import package_versions
from pytest_modelbench.gate.rejudge import documents_json
from pytest_modelbench.run_record import record_text
from pytest_modelbench.sharding import Shard, ShardError, assign, estimated_cost, join_units, parse_shard

SHARD_KEY = pytest.StashKey[Shard]()
RECORDER_KEY = pytest.StashKey["RunRecorder"]()
_WORKER_OUTPUT_KEY = "modelbench_run_record"
_EVIDENCE_ATTRIBUTE = "modelbench_gate_evidence"
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2}  # an item's outcome: the worst of its phases'
# Run options that change the numbers. Where a shard runs (device, servers, data folder, cache) does not, nor where
# its checkpoint lies (--model, --model-args paths): the merge compares the weights' fingerprints, and the scorer's
# knobs are in each task's scoring protocol.
NUMBER_OPTIONS = ("dtype", "model_type", "batch_size", "num_fewshot", "limit",
                  "shared_prefixes", "allow_task_code", "apply_chat_template", "system_instruction",
                  "fewshot_as_multiturn")


def add_options(group: Any) -> None:
    group.addoption("--shard", default=None, metavar="K/N",
                    help="run shard K of N of the selected items, balanced by estimated cost (the same split on "
                    "every machine); alpha is still shared by the whole session's tasks")
    group.addoption("--run-record", default=None, metavar="PATH",
                    help="write this run's record (its tasks' verdicts and scores, and the session it belongs to) "
                    "for `python -m pytest_modelbench merge`")


def configure(config: pytest.Config) -> None:
    text = config.getoption("--shard")
    try:
        config.stash[SHARD_KEY] = parse_shard(text) if text is not None else Shard(1, 1)
    except ShardError as exc:
        raise pytest.UsageError(str(exc)) from None
    path = cli_options.output_path("--run-record", config.getoption("--run-record"),
                                   Path(config.invocation_params.dir))
    if path is not None:
        recorder = config.stash[RECORDER_KEY] = RunRecorder(path)
        config.pluginmanager.register(recorder, "modelbench-run-record")


def _scored_tasks(item: pytest.Item) -> list[tuple[Path, str, Any]]:
    """(task file, config hash, config) of each task the item scores; none for a custom test."""
    if hasattr(item, "group"):
        return [(config.source.resolve(), config.config_hash, config) for _, config, _ in item.group.leaf_tasks]
    config = getattr(item, "task_config", None)
    return [] if config is None else [(config.source.resolve(), config.config_hash, config)]


def _config_hash(item: pytest.Item) -> str:
    hashes = sorted(config_hash for _, config_hash, _ in _scored_tasks(item))
    return hashes[0] if len(hashes) == 1 else hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:16]


def select_shard(config: pytest.Config, items: list[pytest.Item], options: Any) -> None:
    """Count the session's gated items for the gate (and note the session for the run record), then keep this
    shard's items."""
    session = config.stash[gate.GATE_KEY]
    session.count_gated(items)
    recorder = config.stash.get(RECORDER_KEY, None)
    if recorder is not None:
        recorder.session = session_identity(session, items, options)
    shard = config.stash[SHARD_KEY]
    if shard.count > 1:
        session.decision.pooled_by_merge = True  # a suite's tasks may run on several shards
        costs: dict[Any, float | None] = {}
        for item in items:
            for source, config_hash, task_config in _scored_tasks(item):
                if (source, config_hash) not in costs:
                    costs[(source, config_hash)] = estimated_cost(task_config, options.data_dir, options.num_fewshot)
        units = join_units([(item.nodeid, [key[:2] for key in _scored_tasks(item)]) for item in items], costs)
        shards = assign(units, shard.count)
        dropped = [item for item in items if shards[item.nodeid] != shard.index]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if shards[item.nodeid] == shard.index]
    if recorder is not None:
        recorder.tasks = {item.task_id.key: item.nodeid for item in items if gate.is_gated(item)}


def session_identity(session: Any, items: list[pytest.Item], options: Any) -> dict[str, Any]:
    """The session a shard belongs to (run_record.py), from the gate session and the items collected before the
    split; a merge derives the same from its own collection (merge_project.py)."""
    return {
        "tasks": {item.task_id.key: _config_hash(item) for item in items if gate.is_gated(item)},
        "alpha_split": session.alpha_split.as_json(),
        "gate": session.policy.as_json(),
        "baselines": session.store.fingerprint(),
        "options": {name: getattr(options, name) for name in NUMBER_OPTIONS},
        "packages": package_versions(),
    }


class RunRecorder:
    """Writes the run record at the session's end (on the xdist controller, from what the workers collected)."""

    def __init__(self, path: Path):
        self.path = path
        self.session: dict[str, Any] | None = None  # the session's identity (run_record.py), before the split
        self.tasks: dict[str, str] = {}  # the gated tasks this shard runs: key → node id
        self.outcomes: dict[str, str] = {}  # every item run: node id → passed | failed | skipped
        self.evidence: dict[str, dict[str, Any]] = {}  # node id → its evidence (gate/pytest_integration.py)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        report = yield
        evidence = item.stash.get(gate.EVIDENCE_KEY, None)
        if call.when == "call" and evidence is not None:
            documents = evidence["documents"]
            evidence = {"candidate": evidence["candidate"],
                        "documents": None if documents is None else documents_json(documents)}
            # pytest-xdist sends it to the controller with the report
            setattr(report, _EVIDENCE_ATTRIBUTE, json.dumps(evidence, ensure_ascii=False))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        before = self.outcomes.get(report.nodeid, "passed")
        self.outcomes[report.nodeid] = max(before, report.outcome, key=_OUTCOME_RANK.__getitem__)
        text = getattr(report, _EVIDENCE_ATTRIBUTE, None)
        if text is not None:
            self.evidence[report.nodeid] = json.loads(text)

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
        from pytest_modelbench.plugin import GATHERED_KEY, RUNNER_KEY
        from pytest_modelbench.report import run_config

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
