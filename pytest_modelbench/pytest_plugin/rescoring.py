"""The pytest side of --rescore-from RECORD: re-score and re-gate a recorded run without its model.

plugin.py calls `configure` (pytest_configure, once the runner is built). It reads the records (their seal and format
checked: outputs/run_record.py), refuses a session that would not be the recorded run (another model, options that
change the numbers, other gate settings, or what needs the model itself), takes --model from the records, and makes
the runner answer every task from them (scoring/replay.py; the runner then loads no model). Each problem is one
usage error naming the record, before anything is collected. A task whose prompts or requests now differ from the
recorded ones fails alone, when it runs, naming the task and the document.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_modelbench.outputs.run_record import RunRecord, RunRecordError, read_record
from pytest_modelbench.pytest_plugin.gate_hooks import GATE_KEY
from pytest_modelbench.pytest_plugin.session_identity import NUMBER_OPTIONS
from pytest_modelbench.run.runner import BenchRunner
from pytest_modelbench.scoring.replay import RecordedOutputs, ReplayBackend, RescoreError

# The gate settings a re-scoring keeps from the record (gate/policy.py, GatePolicy.as_json): the baselines compared
# with and how the verdicts are reached. --score-only and --early-stop may differ: they change what is judged, not how.
GATE_SETTINGS = {
    "baseline_name": "--baseline-name",
    "baseline_ref": "--baseline-ref (its commit)",
    "overrides": "the margins and alpha given on the command line (--gate-margin, --gate-relative-margin, "
                 "--gate-alpha)",
    "error_control": "--gate-error-control",
}
_OPTION_FLAGS = {"shared_prefixes": "--plain-scoring"}  # else the option's own: "--" + name with dashes


def add_options(group: Any) -> None:
    group.addoption("--rescore-from", action="append", default=[], metavar="RECORD",
                    help="re-score and re-gate the run recorded in RECORD (a --run-record file; repeat for a "
                    "session's shards) with the task configs' current filters and metrics, without loading the "
                    "model; a task whose prompts or requests differ from the recorded ones fails")


def configure(config: pytest.Config, runner: BenchRunner) -> None:
    given = config.getoption("--rescore-from")
    if not given:
        return
    start = Path(config.invocation_params.dir)
    try:
        records = [read_record(start / path) for path in given]
        recorded = RecordedOutputs.from_json(records[0].outputs, str(records[0].path))
        for record in records[1:]:
            recorded = recorded.joined(RecordedOutputs.from_json(record.outputs, str(record.path)), str(record.path))
    except (RunRecordError, RescoreError) as exc:
        raise pytest.UsageError(f"--rescore-from {exc}") from None
    for record in records:
        problem = _difference(config, runner, record)
        if problem is not None:
            raise pytest.UsageError(f"--rescore-from {record.path}: {problem}")
    runner.options = dataclasses.replace(runner.options, model=records[0].run_config.get("model"),
                                         rescored_from=tuple(str(record.path) for record in records))
    runner.replay(ReplayBackend(recorded, config.rootpath))
    config.pluginmanager.register(_Summary(records, recorded), "modelbench-rescore")


class _Summary:
    """The terminal summary's line saying where this session's numbers came from."""

    def __init__(self, records: list[RunRecord], recorded: RecordedOutputs):
        self.records, self.recorded = records, recorded

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):
            return
        backend = self.recorded.backend
        terminalreporter.write_line(
            f"modelbench: re-scored from {', '.join(str(record.path) for record in self.records)} (model "
            f"'{backend.name}', weights {backend.fingerprint}) with the tasks' current filters and metrics; no model "
            "was loaded")


def _difference(config: pytest.Config, runner: BenchRunner, record: RunRecord) -> str | None:
    """Why this session cannot re-score `record`'s run; None when it can."""
    options = runner.options
    model = record.run_config.get("model")
    if options.model is not None and options.model != model:
        return (f"it is a run of model {model!r}, not of --model {options.model!r}: leave --model out (the record "
                "names the model) or name the recorded one")
    recorded_options = _mapping(record.session["options"])
    for name in NUMBER_OPTIONS:
        now, then = getattr(options, name), recorded_options.get(name)
        if now != then:
            flag = _OPTION_FLAGS.get(name, "--" + name.replace("_", "-"))
            return (f"{flag} differs from the recorded run's ({name}: {then!r} recorded, {now!r} now), which changes "
                    "the numbers; re-score with the recorded run's options")
    if options.apply_chat_template:
        return ("the recorded run rendered its prompts with a chat template (--apply-chat-template), which needs "
                "the model's tokenizer; re-scoring such a run is not supported: run it with the model")
    policy = config.stash[GATE_KEY].policy
    if policy.noise_floor:
        return "--noise-floor scores the model a second time; it cannot run from a record"
    current, recorded_gate = policy.as_json(), _mapping(record.session["gate"])
    for key, label in GATE_SETTINGS.items():
        if current.get(key) != recorded_gate.get(key):
            return (f"{label} differs from the recorded run's ({recorded_gate.get(key)!r} recorded, "
                    f"{current.get(key)!r} now): a re-scoring re-gates the recorded run as it was gated")
    return None


def _mapping(value: Any) -> dict[str, Any]:
    """A record's section as written (a sealed record's are objects); anything else reads as empty, so differs."""
    return value if isinstance(value, dict) else {}
