"""The merging project's own gate, derived as pytest derives it: the merge collects the session (`pytest
--collect-only`, in this process, nothing scored) in the current directory with the pytest arguments it is given, so
the gate policy, the plan of gated tasks, each task's tolerance and the baselines are this checkout's and these
options', never a record's claim (outputs/record_merge.py compares the records with them).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any, Sequence

import pytest

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.alpha_split import AlphaSplit
from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.policy import GatePolicy
from pytest_modelbench.gate.storage import BaselineStore
from pytest_modelbench.pytest_plugin import gate_hooks as gate
from pytest_modelbench.pytest_plugin.session_identity import session_identity
from pytest_modelbench.pytest_plugin.stash_keys import RUNNER_KEY
from pytest_modelbench.tasks.identity import TaskId


class ProjectError(ModelbenchError):
    """The merging project's session cannot be collected here."""


@dataclass(frozen=True)
class ProjectGate:
    session: dict[str, Any]  # as a shard's record states its session (session_identity.py)
    policy: GatePolicy
    store: BaselineStore
    split: AlphaSplit
    identities: dict[str, TaskId]  # every gated task of the plan, by key
    tolerances: dict[str, Tolerance]  # its tolerance, with its share of the session's alpha


class _Collector:
    """Registered for the collection only: reads the gate session once every item is collected and split."""

    def __init__(self) -> None:
        self.gate: ProjectGate | None = None
        self.policy_failure: str | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        config = session.config
        gate_session = config.stash[gate.GATE_KEY]
        if gate_session.policy_failure is not None:  # --baseline-ref: this checkout's policy is not the ref's
            self.policy_failure = str(gate_session.policy_failure)
            return
        items = [item for item in session.items if gate.is_gated(item)]
        split = gate_session.alpha_split
        self.gate = ProjectGate(
            session=session_identity(gate_session, session.items, config.stash[RUNNER_KEY].options),
            policy=gate_session.policy, store=gate_session.store, split=split,
            identities={item.task_id.key: item.task_id for item in items},
            tolerances={item.task_id.key: _tolerance(gate_session, item, split) for item in items},
        )


def _tolerance(gate_session: Any, item: pytest.Item, split: AlphaSplit) -> Tolerance:
    """The tolerance judge.py gives the item's candidate record: its YAML's gate block, the command line's and the
    scored metrics' margins (a group's: its aggregates over its tasks' metrics), its share of alpha."""
    config, metrics = gate.tolerance_inputs(item)
    return gate_session.policy.tolerance(config, split, item.task_id.key, metrics)  # type: ignore[attr-defined]


def project_gate(pytest_args: Sequence[str]) -> ProjectGate:
    """This checkout's gate for the session `pytest_args` select (the shards' selection and gate options, without
    --model, --shard or --run-record); ProjectError with pytest's last words when it cannot be collected."""
    collector = _Collector()
    output = io.StringIO()
    args = ["--collect-only", "-q", "-s", "-p", "no:cacheprovider", *pytest_args]
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        status = pytest.main(args, plugins=[collector])
    if collector.policy_failure is not None:  # one line, as every refusal: the changes joined
        changes = "; ".join(line.strip() for line in collector.policy_failure.splitlines() if line.strip())
        raise ProjectError(f"this checkout's gate policy is not the one at --baseline-ref: {changes}")
    if collector.gate is None or status not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        lines = [line for line in output.getvalue().splitlines() if line.strip()]
        last = lines[-1].strip("= ") if lines else "no output"
        raise ProjectError(f"this project's session cannot be collected here (pytest --collect-only "
                           f"{' '.join(pytest_args)} exited {int(status)}: {last}); run the merge in the checkout "
                           "the shards ran, with their selection and gate options after --")
    return collector.gate
