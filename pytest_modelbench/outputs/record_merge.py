"""The merge of a session's run records (outputs/run_record.py): one verdict from a session run as shards on many
machines.

The merge trusts no conclusion of a record. It is given this checkout's gate, as the pytest layer derives it by
collecting the session the shards ran (pytest_plugin/merge_project.py: the checkout, with their selection and gate options), and
recomputes every compared task's entries, p-values and verdict from its evidence against this checkout's baselines
with this checkout's policy (gate/rejudge.py), then the suites' pooled entries from those results, the session's
decision and the exit status. Taken from the records, under their seal: the outcome of custom tests (only their
shard ran them), failures (a task that failed to score, a missing or incomparable baseline: a claim that can only
fail the session), the unused baselines, the scores table, and the shards' exit statuses, which can raise the
merge's exit status and never lower it.

It fails closed, naming the record: a record that is damaged, edited (digest) or wrongly signed; a missing shard, a
shard given twice, a task in two shards or in none; records of different sessions (tasks, configs, task weights,
gate settings, baselines, options, package versions), of another session than this project's, of different
checkpoints; a shard that did not finish (interrupted, internal or usage error) or scored nothing (--collect-only,
no --model, its tasks skipped); a task whose result cannot be recomputed from its evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from pytest_modelbench.gate.alpha_split import AlphaSplit
from pytest_modelbench.gate.baseline import Tolerance
from pytest_modelbench.gate.decision import EXIT_STATUS_FAIL, EXIT_STATUS_INTEGRITY, SessionDecision
from pytest_modelbench.gate.policy import GatePolicy
from pytest_modelbench.gate.rejudge import EvidenceProblem, rejudge
from pytest_modelbench.gate.result import (
    STATUS_COMPARED,
    STATUS_ERROR,
    STATUS_INVALID,
    STATUS_MISSING,
    STATUS_POLICY,
    STATUS_REBASELINE,
    GateResult,
)
from pytest_modelbench.gate.storage import BaselineStore
from pytest_modelbench.outputs.results import json_text, results_document
from pytest_modelbench.outputs.run_record import SESSION_FIELDS, RecordedResult, RunRecord, RunRecordError
from pytest_modelbench.tasks.identity import TaskId

# the exit statuses of a run that ran all its items: passed, some failed, only runs failed (gate/decision.py)
FINISHED = (0, 1, EXIT_STATUS_INTEGRITY)
# failed without a comparison (a task in `error` was judged on its run's integrity, which the merge takes as it is)
FAILED_STATUSES = (STATUS_MISSING, STATUS_INVALID, STATUS_REBASELINE, STATUS_POLICY, STATUS_ERROR)
PROJECT_FIELDS = ("tasks", "alpha_split", "gate", "baselines")  # what the merging project decides itself


@dataclass
class MergedSession:
    """The session's decision and reports, recomputed from its shards' records."""

    records: tuple[RunRecord, ...]
    decision: SessionDecision
    scores: list[Mapping[str, Any]] = field(default_factory=list)
    failed: bool = False  # a task or custom test failed (recomputed, or a failure its record states)

    @property
    def exit_status(self) -> int:
        """As the one process would exit: 1 when the decision's outcome fails (a task or test failed, recomputed here
        or as its record states; a suite's pooled entry regressed, judged here as no shard saw all of a suite's tasks;
        a baseline is unused; a shard exited 1: a record's own status can raise the merge's, never lower it), 7 when
        every failure is a task in `error` (the run, not the model), else 0. The reports head with the same
        outcome."""
        outcome = self.decision.outcome()
        if outcome.failed:
            return outcome.exit_status
        return EXIT_STATUS_FAIL if self.failed else 0

    def results_json(self) -> str:
        return json_text(results_document(self.scores, dict(self.records[0].run_config),
                                          self.decision.outcomes_json(), self.decision.pooled_json(),
                                          self.decision.outcome_json()))


def merge(records: Sequence[RunRecord], *, session: Mapping[str, Any], policy: GatePolicy, store: BaselineStore,
          split: AlphaSplit, identities: Mapping[str, TaskId], tolerances: Mapping[str, Tolerance]) -> MergedSession:
    """The records' session judged by this checkout's gate, or RunRecordError naming the records that cannot be
    merged. This checkout's gate, as the pytest layer collects it (pytest_plugin/merge_project.py, ProjectGate): `session`, its
    identity as a shard's record states it; `policy`, `store` and `split`, its gate policy, baselines and split of
    alpha; `identities` and `tolerances`, each gated task's identity and tolerance, by key."""
    if not records:
        raise RunRecordError("no run records to merge")
    _check_shards(records)
    _check_session(records)
    _check_project(records, session, policy.score_only)
    _check_tasks(records)
    unfinished = [r for r in records if r.exit_status not in FINISHED]
    if unfinished:
        raise RunRecordError(
            "shards that did not finish cannot give a verdict: "
            + ", ".join(f"{r.name} exited {r.exit_status}" for r in unfinished)
            + "; re-run them (pytest's exit status: 2 interrupted, 3 internal error, 4 usage error)"
        )
    decision = SessionDecision.under(policy, pooled_weights=dict(split.pooled),
                                     pytest_status=max(record.exit_status for record in records))
    failed = False
    for record in records:
        _check_scored(record)
        results, task_failed = _judged(record, policy, store, identities, tolerances)
        decision.results.extend(results)
        failed = failed or task_failed
        decision.custom_tests.update(record.custom_tests)
        decision.unused.update(record.unused)
        decision.failed_tests.update(nodeid for nodeid, outcome in record.outcomes.items() if outcome == "failed")
        failed = failed or any(record.outcomes.get(nodeid) == "failed" for nodeid in record.custom_tests)
    _check_checkpoint(records, decision.results)
    scores = sorted((s for r in records for s in r.scores), key=lambda s: s["key"])
    return MergedSession(tuple(records), decision, scores, failed)


def _check_project(records: Sequence[RunRecord], project_session: Mapping[str, Any], score_only: bool) -> None:
    """The records (one session, checked before) are of this project's session: the plan, the split of alpha, the
    gate settings and the baselines this checkout and the merge's options give."""
    if score_only:
        raise RunRecordError("--score-only runs no gate: a merge gives a verdict (drop --score-only after --)")
    session = records[0].session
    for key in PROJECT_FIELDS:
        if json.dumps(session[key], sort_keys=True) != json.dumps(project_session[key], sort_keys=True):
            raise RunRecordError(
                f"the records are not of this project's session: their {SESSION_FIELDS[key]} differ from this "
                f"checkout's ({_first_difference(session[key], project_session[key])}; records: {_names(records)}); "
                "merge in the checkout the shards ran, giving their selection and gate options after --"
            )
    if not session["tasks"]:
        raise RunRecordError(f"the session gates no task (every task deselected?): {_names(records)}")


def _check_scored(record: RunRecord) -> None:
    """A shard that ran its gated tasks: not a --collect-only run, not one whose tasks were skipped (no --model)."""
    if not record.tasks:
        return  # an empty shard of a split session (more shards than tasks)
    outcomes = [record.outcomes.get(nodeid) for nodeid in record.tasks.values()]
    if all(outcome is None for outcome in outcomes):
        raise RunRecordError(f"{record.name} ran none of its {len(outcomes)} gated task(s) (a --collect-only run?): "
                             "re-run the shard")
    if all(outcome in (None, "skipped") for outcome in outcomes):
        raise RunRecordError(f"{record.name} scored none of its {len(outcomes)} gated task(s): they were skipped "
                             "(no --model?); re-run the shard with the model")


def _judged(record: RunRecord, policy: GatePolicy, store: BaselineStore, identities: Mapping[str, TaskId],
            tolerances: Mapping[str, Tolerance]) -> tuple[list[GateResult], bool]:
    """The record's tasks' results recomputed from their evidence, and whether one of them failed."""
    by_nodeid = {recorded.result.nodeid: recorded for recorded in record.results}
    results, failed = [], False
    for key, nodeid in sorted(record.tasks.items()):
        outcome, recorded = record.outcomes.get(nodeid), by_nodeid.get(nodeid)
        where = f"{record.name}: task {key}"
        if outcome is None or outcome == "skipped":
            raise RunRecordError(f"{where} {'did not run' if outcome is None else 'was skipped'}: a verdict needs "
                                 "every task of the session scored; re-run the shard")
        if recorded is None or recorded.result.task != key:
            if outcome == "passed":
                raise RunRecordError(f"{where} passed without a gate result: the record is inconsistent; re-run "
                                     "the shard")
            failed = True  # it failed before the gate judged it (a scoring error): the record's word for a failure
            continue
        result = recorded.result
        if result.status in FAILED_STATUSES:
            failed = True  # no comparison to recompute: a missing, invalid or incomparable baseline fails the task
            results.append(result)
            continue
        if result.status != STATUS_COMPARED:
            raise RunRecordError(f"{where} was not judged against a baseline (status {result.status!r}: a run "
                                 "that writes baselines or scores only gives no verdict); re-run the shard as a gate")
        if recorded.candidate is None:
            raise RunRecordError(f"{where}: its result carries no evidence to recompute it from (a task stopped "
                                 "early by --early-stop is judged on part of its documents; run the shards without "
                                 "it)")
        results.append(_recomputed(where, recorded, policy, store, identities[key], tolerances[key]))
        failed = failed or results[-1].failed or outcome == "failed"
    return results, failed


def _recomputed(where: str, recorded: RecordedResult, policy: GatePolicy, store: BaselineStore, identity: TaskId,
                tolerance: Tolerance) -> GateResult:
    result = recorded.result
    path = store.path(identity)
    stored_text, working_tree_differs = store.read(path)
    try:
        return rejudge(result, str(recorded.candidate), stored_text, documents=recorded.documents,
                       tolerance=tolerance,
                       baseline_display=store.display(path), baseline_name=policy.baseline_name,
                       baseline_ref=None if policy.baseline_ref is None else policy.baseline_ref.ref,
                       working_tree_differs=working_tree_differs, clusters=recorded.clusters or ())
    except EvidenceProblem as exc:
        raise RunRecordError(f"{where}: cannot recompute its result: {exc}") from None


def _names(records: Iterable[RunRecord]) -> str:
    return ", ".join(r.name for r in records)


def _check_shards(records: Sequence[RunRecord]) -> None:
    counts = sorted({r.shard.count for r in records})
    if len(counts) > 1:
        raise RunRecordError(f"the records split the session into different numbers of shards ({counts}): "
                             + _names(records))
    count = counts[0]
    by_index: dict[int, list[RunRecord]] = {}
    for record in records:
        by_index.setdefault(record.shard.index, []).append(record)
    twice = {index: given for index, given in sorted(by_index.items()) if len(given) > 1}
    if twice:
        index, given = next(iter(twice.items()))
        raise RunRecordError(f"shard {index}/{count} is given {len(given)} times: {_names(given)}; "
                             "merge one record per shard")
    missing = [index for index in range(1, count + 1) if index not in by_index]
    if missing:
        raise RunRecordError(
            f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{i}/{count}' for i in missing)} "
            f"missing: a verdict needs every shard of the session (given: {_names(records)})"
        )


def _check_session(records: Sequence[RunRecord]) -> None:
    for key, label in SESSION_FIELDS.items():
        values: dict[str, list[RunRecord]] = {}
        for record in records:
            values.setdefault(json.dumps(record.session[key], sort_keys=True), []).append(record)
        if len(values) > 1:
            sides = list(values.values())
            detail = _first_difference(sides[0][0].session[key], sides[1][0].session[key])
            raise RunRecordError(
                f"the records are not shards of one session: their {label} differ ({detail}): "
                + " vs ".join(f"[{_names(side)}]" for side in sides)
            )


def _first_difference(a: Any, b: Any) -> str:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{key!r} only in one"
            if a[key] != b[key]:
                return f"{key!r}: {a[key]!r} vs {b[key]!r}"
    return f"{a!r} vs {b!r}"


def _check_checkpoint(records: Sequence[RunRecord], results: Sequence[GateResult]) -> None:
    """One checkpoint: the weights' fingerprints in the candidates' provenance (recomputed from the evidence)."""
    shard_of = {nodeid: record for record in records for nodeid in record.tasks.values()}
    fingerprints: dict[str, list[RunRecord]] = {}
    for result in results:
        fingerprint = (result.candidate_provenance or {}).get("model_fingerprint")
        if fingerprint and shard_of[result.nodeid] not in fingerprints.setdefault(str(fingerprint), []):
            fingerprints[str(fingerprint)].append(shard_of[result.nodeid])
    if len(fingerprints) > 1:
        raise RunRecordError(
            "the shards scored different checkpoints: "
            + "; ".join(f"{fingerprint} in [{_names(given)}]" for fingerprint, given in sorted(fingerprints.items()))
        )


def _check_tasks(records: Sequence[RunRecord]) -> None:
    ran: dict[str, list[RunRecord]] = {}
    for record in records:
        for task in record.tasks:
            ran.setdefault(task, []).append(record)
    twice = {task: given for task, given in sorted(ran.items()) if len(given) > 1}
    if twice:
        task, given = next(iter(twice.items()))
        raise RunRecordError(f"task {task} ran in {len(given)} shards: {_names(given)}; each task is judged once")
    expected = set(records[0].session["tasks"])
    foreign = sorted(set(ran) - expected)
    if foreign:
        raise RunRecordError(f"task {foreign[0]} is not of the session: {_names(ran[foreign[0]])}")
    missing = sorted(expected - set(ran))
    if missing:
        raise RunRecordError(f"task{'s' if len(missing) > 1 else ''} {', '.join(missing)} of the session ran in no "
                             f"shard (given: {_names(records)})")
