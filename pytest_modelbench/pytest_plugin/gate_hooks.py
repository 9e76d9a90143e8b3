# Over 400 lines: the session hooks of the gate are one object (GateSession) whose state they all share.
"""The gate's pytest layer: one check per gated item, and the session hooks (its options and policy:
gate_options.py); the gate itself is plain modules (gate/policy.py, gate/storage.py, gate/judge.py, gate/decision.py).

plugin.py calls `configure` (pytest_configure; registers `GateSession`, which
holds the session hooks), `GateSession.count_gated` (pytest_collection_modifyitems, before --shard keeps one shard's
items), `check_ready`, `early_stop` and `check_item` (a gated item's runtest: before scoring, how to score, after the
evaluation), and `outcomes_json`, `outcome_json`, `pooled_json` for --results-json.

It fails closed: without --score-only every task item is gated, and a baseline name with no baselines folder fails
each item before anything is scored, naming the command that records them. --score-only scores and reports without
reading or writing a baseline; the summary and --results-json say that no gate ran. The outcomes of one item are
judge.py's.

Gate policy: when collection finishes `GateSession` computes the session's effective policy (gate/policy_file.py);
--snapshot-update records it in `<baselines>/<name>/gate-policy.json`, and with --baseline-ref a policy that is not
the one recorded at the ref fails every gated item before it is scored.

Error control: `GateSession` weighs the gated items collected (before any --shard split, see `count_gated`) and
every item is gated at its alpha × its weight / their weights' sum (--gate-error-control=session, the default;
gate/alpha_split.py) or at its alpha (=task); see docs/error-rates.md, "Error rates". Margins are resolved per
metric by `gate/settings.py`.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any, Sequence

import pytest
from _pytest import junitxml

from pytest_modelbench.errors import BaselineError
from pytest_modelbench.gate import policy_file, pooled
from pytest_modelbench.gate.alpha_split import AlphaSplit
from pytest_modelbench.gate.decision import SessionDecision
from pytest_modelbench.gate.early_stop import EarlyStop
from pytest_modelbench.gate.judge import GateOutcome, early_stop_for, judge_task
from pytest_modelbench.gate.noise_floor import NoiseFloorWarning
from pytest_modelbench.gate.policy import GateOptionError
from pytest_modelbench.gate.pooled_looks import settle_pooled_looks
from pytest_modelbench.gate.result import STATUS_MISSING, STATUS_POLICY, GateResult
from pytest_modelbench.gate.storage import YAML_SUFFIXES, BaselineStore
from pytest_modelbench.metrics.group_scores import group_metrics
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.pytest_plugin import cli_options, gate_options, interruption
from pytest_modelbench.pytest_plugin.stash_keys import WRITE_FAILURES_KEY
from pytest_modelbench.pytest_plugin.syrupy_extension import BaselineExtension, BaselineSite, BaselineUpdateExtension
from pytest_modelbench.outputs.failure_messages import failure_error
from pytest_modelbench.outputs.result_properties import PROPERTY_PREFIX, properties, result_from_properties
from pytest_modelbench.outputs.session_reports import terminal_section, write_reports
from pytest_modelbench.tasks.identity import TaskId, suites_under

_UNUSED_OUTPUT_KEY = "modelbench_gate_unused"
_POOLED_OUTPUT_KEY = "modelbench_gate_pooled"
OUTCOME_PROPERTY = PROPERTY_PREFIX + ".outcome"  # --junitxml's test-suite property: the session's outcome (JSON)
_POLICY_OUTPUT_KEY = "modelbench_gate_policy"
GATED_ITEMS = ("TaskItem", "GroupItem")  # plugin.py's items that are gated: a task, a group (each one task here)
# An item's evidence for --run-record (recording.py): its candidate record (Judgement.candidate_text) and, where a
# metric aggregates over the documents themselves, its documents
EVIDENCE_KEY = pytest.StashKey[dict]()


def configure(config: pytest.Config) -> "GateSession":
    session = GateSession(config)
    config.stash[GATE_KEY] = session
    config.pluginmanager.register(session, "modelbench-gate")
    return session


def check_ready(item: pytest.Item) -> None:
    """Fail a gated item before it is scored when the gate has no baselines to compare it with."""
    session = item.config.stash.get(GATE_KEY, None)
    if session is not None:
        session.check_ready(item)


def early_stop(item: pytest.Item, runner: Any) -> EarlyStop | None:
    """The item's early stopping under --early-stop (a task item with a readable baseline), else None."""
    session = item.config.stash.get(GATE_KEY, None)
    if session is None or not session.policy.early_stop or hasattr(item, "group"):
        return None
    return early_stop_for(item.task_id, runner, policy=session.policy, store=session.store,  # type: ignore[attr-defined]
                          split=session.alpha_split,
                          one_process=not hasattr(item.config, "workerinput") and not session.decision.pooled_by_merge)


def check_item(item: pytest.Item, evaluation: Any, runner: Any, stopping: EarlyStop | None = None) -> None:
    """Gate one evaluated item against its baseline (judge.py); raises what the item fails with."""
    session = item.config.stash.get(GATE_KEY, None)
    if session is not None:
        session.check(item, evaluation, runner, stopping)


def is_gated(item: pytest.Item) -> bool:
    return type(item).__name__ in GATED_ITEMS


def yaml_weight(item: pytest.Item) -> float | None:
    """A gated item's `modelbench.gate.weight`: its task YAML's, or for a group its group YAML's own."""
    config = item.group.tree.config if hasattr(item, "group") else item.task_config  # type: ignore[attr-defined]
    return config.gate.weight


def poolable_metrics(item: pytest.Item) -> tuple[str, ...]:
    """A task item's metrics that its suite's pooled entries pool (gate/pooled.py); a group item pools none."""
    if hasattr(item, "group"):
        return ()
    return tuple(m.name for m in resolve_metrics(item.task_config)  # type: ignore[attr-defined]
                 if pooled.poolable(bool(m.binary), m.direction.kind))


def tolerance_inputs(item: pytest.Item) -> tuple[Any, Any]:
    """What a gated item's tolerance is resolved from: the config holding its YAML gate block (a group item: its
    group YAML's), and its metrics (a group's: its aggregates, as score_group makes them)."""
    if hasattr(item, "group"):
        group = item.group  # type: ignore[attr-defined]
        leaf_metrics = {leaf.name: resolve_metrics(config) for leaf, config, _ in group.leaf_tasks}
        return group.tree.config, [metric for metric, _ in group_metrics(group.tree, leaf_metrics)]
    return item.task_config, resolve_metrics(item.task_config)  # type: ignore[attr-defined]


class GateSession:
    """Per-session gate state and hooks (registered as a plugin by `configure`)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        invocation_dir = Path(config.invocation_params.dir)
        self.md_report = cli_options.output_path("--md-report", config.getoption("--md-report"), invocation_dir)
        self.html_report = cli_options.output_path("--html-report", config.getoption("--html-report"), invocation_dir)
        self.policy = gate_options.policy_from_options(config)
        self.store = BaselineStore(self.policy, config.rootpath)
        option = config.option
        self.warn_unused = bool(getattr(option, "warn_unused_snapshots", False))
        self.disable_unused = bool(getattr(option, "disable_unused_snapshots", False))
        self.no_cleanup = bool(getattr(option, "no_cleanup", False))
        self.suite_roots = [Path(p) for p in config.getini("modelbench_suites")]
        self.suite_dirs: set[Path] = set()
        self.collected: set[str] = set()  # the keys of every gated item collected, deselected ones too
        self.split: AlphaSplit | None = None  # made when collection finishes, or by --shard before it splits
        # the session's effective gate policy (gate/policy_file.py), made with the split (None: no gated item; under
        # xdist's controller, what a worker reports when the policy may be recorded); and whether it may be recorded:
        # no gated item was deselected, so its task set is its suites'
        self.effective_policy: dict[str, Any] | None = None
        self.whole_suites = False
        self.policy_failure: policy_file.GatePolicyChanged | None = None  # --baseline-ref: fails every gated item
        self.policy_note: str | None = None  # what --snapshot-update did with the policy file, for the summary
        # updates of this name's baselines killed before they ended (gate/storage.py), for the summary
        self.unfinished_updates = [] if hasattr(config, "workerinput") else self.store.unfinished_updates()
        # --early-stop in one process: the early stopping of each task of a suite with pooled entries, by key
        self.early_stops: dict[str, EarlyStop] = {}
        self.decision = SessionDecision.under(self.policy, display=self.store.display, warn_unused=self.warn_unused,
                                              write_failures=config.stash.setdefault(WRITE_FAILURES_KEY, []))

    @property
    def baseline_name(self) -> str:
        return self.policy.baseline_name

    @property
    def alpha_split(self) -> AlphaSplit:
        """How the session's alpha is shared by its gated tasks."""
        return self.split or AlphaSplit(error_control=self.policy.error_control)

    def count_gated(self, items: Sequence[pytest.Item]) -> None:
        """Weigh the session's gated items; called before --shard keeps one shard's items (plugin.py,
        pytest_collection_modifyitems), so that every shard splits alpha over the whole session."""
        gated = [item for item in items if is_gated(item)]
        try:
            self.split = self.policy.alpha_split({item.task_id.key: yaml_weight(item) for item in gated},
                                                 self.collected, {item.task_id.key: poolable_metrics(item)
                                                                  for item in gated},
                                                 suites_under(self.suite_roots) if self.suite_roots else None)
        except GateOptionError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.decision.pooled_weights = dict(self.split.pooled)
        if self.policy.score_only or not gated:
            return
        items_policy = {}
        for item in gated:
            config, metrics = tolerance_inputs(item)
            items_policy[item.task_id.key] = (config.gate, self.policy.tolerance(config, self.split, item.task_id.key,
                                                                                 metrics))
        self.effective_policy = policy_file.session_policy(self.policy, self.split, items_policy)
        self.whole_suites = set(items_policy) == self.collected
        if self.policy.baseline_ref is None:
            return
        try:
            protected = self.store.protected_tolerances(self.effective_policy)
        except policy_file.GatePolicyChanged as exc:
            self.policy_failure = exc
        except BaselineError as exc:  # an unreadable policy file at the ref
            self.policy_failure = policy_file.GatePolicyChanged(str(exc), str(exc).split(" (", 1)[0])
        else:
            self.policy = self.store.policy = dataclasses.replace(self.policy, protected=protected)

    # ------------------------------------------------------------------ one item

    def check_ready(self, item: pytest.Item) -> None:
        identity: TaskId = item.task_id  # type: ignore[attr-defined]
        ref = self.policy.baseline_ref
        if self.policy_failure is not None and ref is not None:
            self._record(item, GateResult(task=identity.key, status=STATUS_POLICY,
                                          baseline=self.store.display(self.store.path(identity)),
                                          baseline_name=self.baseline_name, baseline_ref=ref.ref,
                                          note=self.policy_failure.note))
            raise self.policy_failure
        if not self.store.missing:
            return
        self._record(item, GateResult(task=identity.key, status=STATUS_MISSING,
                                      baseline=self.store.display(self.store.path(identity)),
                                      baseline_name=self.baseline_name, note="no baselines of this name"))
        raise BaselineError(self.store.missing_message())

    def check(self, item: pytest.Item, evaluation: Any, runner: Any, stopping: EarlyStop | None) -> None:
        judgement = judge_task(
            item.task_id, evaluation, runner, policy=self.policy, store=self.store,  # type: ignore[attr-defined]
            split=self.alpha_split,
            persist=lambda path, candidate, stored, outcome: self._persist(item, path, candidate, stored, outcome),
            changed_documents=self.html_report is not None, early_stop=stopping,
            rescore=self._rescore(item, evaluation, runner) if self.policy.noise_floor else None,
        )
        self._record(item, judgement.result)
        if judgement.candidate_text is not None:
            aggregated = any(getattr(m, "aggregate", None) is not None for m in evaluation.scores.metrics)
            item.stash[EVIDENCE_KEY] = {"candidate": judgement.candidate_text,
                                        "clusters": list(judgement.candidate_clusters) or None,
                                        "documents": evaluation.prepared.documents if aggregated else None}
        if stopping is not None and stopping.pooled == "suite":
            self.early_stops[item.task_id.key] = stopping  # type: ignore[attr-defined]
        if judgement.warning is not None:
            # attributed to the task's YAML, not to this line: the margins to look at are the task's
            warnings.warn_explicit(NoiseFloorWarning(judgement.warning), NoiseFloorWarning, str(item.path), 1)
        if judgement.failure is not None:
            raise failure_error(judgement.failure)

    @staticmethod
    def _rescore(item: pytest.Item, evaluation: Any, runner: Any):
        """--noise-floor: the item scored again by the runner's second backend (run/runner.py, noise_runner), and how."""
        def rescore() -> tuple[Any, str]:
            noise = runner.noise_runner()
            output_type = evaluation.prepared.config.output_type
            second = item.evaluate(noise)  # type: ignore[attr-defined]
            return second, f"{noise.scoring_setup(output_type)} (first scoring: {runner.scoring_setup(output_type)})"
        return rescore

    def _persist(self, item: pytest.Item, path: Path, candidate_text: str, stored_text: str | None,
                 outcome: GateOutcome | None) -> bool:
        """Under --snapshot-update(-new-only), let syrupy write the candidate's record where the stored one is
        missing or out of band (its summary counts it; the write is storage.write_baseline); True if written."""
        syrupy_session = getattr(item.config, "_syrupy", None)
        if syrupy_session is None:  # syrupy is off: no --snapshot-update, nothing is written
            return False
        from syrupy.assertion import SnapshotAssertion
        from syrupy.location import PyTestLocation

        policy = self.policy
        if policy.writes:
            self.store.begin_update()  # removed when the session ends (pytest_unconfigure): a kill leaves it
        assertion = SnapshotAssertion(
            session=syrupy_session,
            extension_class=BaselineUpdateExtension if policy.update else BaselineExtension,
            test_location=PyTestLocation(BaselineSite(item, path)),  # type: ignore[arg-type]
            update_snapshots=policy.update,
            update_new_snapshots_only=policy.update_new_only,
        )
        if stored_text is not None and outcome is not None:
            assertion.extension.decided = (candidate_text, stored_text, outcome)
        assertion.extension.rerecord = policy.noise_floor  # the floor must describe the stored scores: write them all
        assertion == candidate_text  # noqa: B015 - syrupy's comparison: records use, writes when updating
        result = assertion.executions[0]
        if isinstance(result.exception, OSError):  # a full disk, an I/O error: the write is atomic (atomic_files.py)
            raise BaselineError(f"{path}: cannot write the baseline ({result.exception.strerror or result.exception}); "
                                "it is left as it was, nothing half-written") from result.exception
        if result.exception is not None:
            raise BaselineError(f"{path}: cannot check or write baseline: {result.exception}") from result.exception
        return bool(result.created or result.updated)

    def _record(self, item: pytest.Item, result: GateResult) -> None:
        item.user_properties.extend(properties(result))

    # ------------------------------------------------------------------ hooks

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Every xdist worker (and every shard) collects the same items, so each one splits alpha over the same
        # weights and an item can be gated on its own, wherever it runs.
        if self.split is None:
            self.count_gated(session.items)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if is_gated(item):
            self.collected.add(item.task_id.key)  # type: ignore[attr-defined]
        if item.path is not None and item.path.suffix in YAML_SUFFIXES and is_gated(item):
            self.suite_dirs.add(Path(item.path).parent.resolve())

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.decision.collection_errors.append(report.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.decision.failed_tests.add(report.nodeid)
        if report.when == "setup" and not report.passed or report.when == "call":
            if Path(report.nodeid.split("::")[0]).suffix not in YAML_SUFFIXES:
                self.decision.custom_tests.add(report.nodeid)  # pytest's totals count these beside the task items
        if report.when != "call":
            return
        result = result_from_properties(report.user_properties, report.nodeid, failed=report.failed)
        if result is not None:
            self.decision.results.append(result)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.decision.unused.update(output.get(_UNUSED_OUTPUT_KEY, ()))
        self.decision.pooled_weights.update(output.get(_POOLED_OUTPUT_KEY, {}))  # every worker collected the same
        if output.get(_POLICY_OUTPUT_KEY) is not None:  # every worker collected the same
            self.effective_policy, self.whole_suites = output[_POLICY_OUTPUT_KEY], True

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.store.end_update()

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        if type(excinfo.value) is not KeyboardInterrupt:
            return  # pytest's own stop after collection errors (exit 2) or xdist's after -x (subclasses), not a signal
        self.decision.interrupted_by = interruption.signal_name(self.config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = self.config
        decision = self.decision
        distributing = config.pluginmanager.has_plugin("dsession")
        finished = decision.interrupted_by is None  # an interrupted session deletes and fails no unused baseline
        if not self.policy.score_only and not self.disable_unused and not distributing and finished:
            decision.unused.update(self.store.find_unused(self.suite_dirs, self.suite_roots))
        if hasattr(config, "workerinput"):
            config.workeroutput[_UNUSED_OUTPUT_KEY] = sorted(decision.unused)  # type: ignore[attr-defined]
            config.workeroutput[_POOLED_OUTPUT_KEY] = decision.pooled_weights  # type: ignore[attr-defined]
            config.workeroutput[_POLICY_OUTPUT_KEY] = (  # type: ignore[attr-defined]
                self.effective_policy if self.whole_suites else None)
            return
        if decision.unused and self.policy.update and not self.no_cleanup:
            for path in sorted(decision.unused):
                Path(path).unlink(missing_ok=True)
                decision.deleted.append(path)
        if decision.interrupted_by is not None:
            judged = {result.task for result in decision.results}
            decision.unfinished = sorted({item.task_id.key for item in session.items if is_gated(item)} - judged)
        else:
            settle_pooled_looks(decision, self.early_stops)  # --early-stop: may score on, and fail the session
        decision.pytest_status = int(session.exitstatus)
        outcome = decision.outcome()
        if outcome.interrupted or (
                outcome.failed and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)):
            session.exitstatus = outcome.exit_status  # 1, 7 where only runs failed, 11 interrupted (gate/decision.py)
        self._record_policy(session)
        junit = config.stash.get(junitxml.xml_key, None)
        if junit is not None:  # written by pytest's own sessionfinish, after this one
            junit.add_global_property(OUTCOME_PROPERTY, json.dumps(outcome.as_json(), ensure_ascii=False))
        write_reports(
            decision, md_report=self.md_report, html_report=self.html_report,
            write=lambda option, path, text: cli_options.write_output(session, option, path, text),
        )

    def _record_policy(self, pytest_session: pytest.Session) -> None:
        """--snapshot-update(-new-only): record the session's gate policy beside its baselines (-new-only: only where
        none is recorded for its suites) when the run passed, or only collected (--collect-only records it without
        scoring). A run with deselected items records none and says so."""
        policy = self.policy
        if not policy.writes or policy.score_only or pytest_session.exitstatus != pytest.ExitCode.OK:
            return
        session = self.effective_policy
        if session is None:
            return
        if not self.whole_suites:
            self.policy_note = ("gate policy not recorded: items were deselected (-k, -m, --deselect), so this "
                                "run's task set is not its suites'; record it from a run of the whole suites")
            return
        if policy.update_new_only and self.store.policy_recorded(session):
            return
        try:
            shown = self.store.record_policy(session)
        except OSError as exc:
            cli_options.write_failed(pytest_session, f"gate policy {self.store.display(self.store.policy_path)}", exc)
            return
        self.policy_note = f"gate policy of suites '{policy_file.session_key(session['tasks'])}' recorded in {shown}"
        if policy.update:
            self.store.clear_unfinished_updates()

    @pytest.hookimpl(trylast=True)  # after the scores and syrupy's snapshot summary
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):
            return
        missing = self.store.missing_message() if self.store.missing else None
        title, lines = terminal_section(self.decision, baselines_missing=missing, update=self.policy.update,
                                        accepted=self.policy.accepted)
        lines = self.unfinished_updates + lines + ([self.policy_note] if self.policy_note else [])
        if not lines:
            return
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)


GATE_KEY = pytest.StashKey[GateSession]()


def outcomes_json(config: pytest.Config) -> dict[str, dict[str, Any]]:
    """Each gated task's outcome for --results-json, by its '<suite>/<task>' key."""
    session = config.stash.get(GATE_KEY, None)
    return {} if session is None else session.decision.outcomes_json()


def outcome_json(config: pytest.Config) -> dict[str, Any] | None:
    """The session's outcome for --results-json: what its exit status says, and why (gate/decision.py)."""
    session = config.stash.get(GATE_KEY, None)
    return None if session is None else session.decision.outcome_json()


def interrupted(config: pytest.Config) -> bool:
    """Whether a signal stopped the session before it finished (pytest_plugin/interruption.py)."""
    session = config.stash.get(GATE_KEY, None)
    return session is not None and session.decision.interrupted_by is not None


def pooled_json(config: pytest.Config) -> list[dict[str, Any]]:
    """The suites' pooled entries for --results-json."""
    session = config.stash.get(GATE_KEY, None)
    return [] if session is None else session.decision.pooled_json()
