"""Run records and their merge: one verdict from a session run as shards on many machines.

A shard (`pytest --shard K/N --run-record PATH`) writes what the session's decision needs from it: the session it
belongs to (`session`: every gated task of the whole session with its config hash, how alpha is split, the gate
settings, a digest of the baselines read, the options that change numbers, the package versions), the gated tasks
it ran (key → node id), the outcome of every item it ran, each gated task's gate result with its EVIDENCE (the
candidate's record, the BaselineRecord its gate compared with the stored baseline, as the baseline store writes it),
the tasks' scores, the unused baselines it found and its exit status; sealed with a digest of its content and, with
MODELBENCH_RECORD_KEY, a signature (record_integrity.py).

The merge trusts no conclusion of a record. It runs in the project (merge_project.py: the checkout the shards ran,
with their selection and gate options) and recomputes every compared task's entries, p-values and verdict from its
evidence against this checkout's baselines with this checkout's policy (gate/rejudge.py), then the suites' pooled
entries from those results, the session's decision and the exit status. Taken from the records, under their seal:
the outcome of custom tests (only their shard ran them), failures (a task that failed to score, a missing or
incomparable baseline: a claim that can only fail the session), the unused baselines, the scores table, and the
shards' exit statuses, which can raise the merge's exit status and never lower it.

It fails closed, naming the record: a record that is damaged, edited (digest) or wrongly signed; a missing shard, a
shard given twice, a task in two shards or in none; records of different sessions (tasks, configs, task weights,
gate settings, baselines, options, package versions), of another session than this project's, of different
checkpoints; a shard that did not finish (interrupted, internal or usage error) or scored nothing (--collect-only,
no --model, its tasks skipped); a task whose result cannot be recomputed from its evidence.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.decision import EXIT_STATUS_FAIL, SessionDecision
from pytest_modelbench.gate.rejudge import EvidenceProblem, rejudge
from pytest_modelbench.gate.report import (
    STATUS_COMPARED,
    STATUS_INVALID,
    STATUS_MISSING,
    STATUS_POLICY,
    STATUS_REBASELINE,
    GateResult,
    properties,
)
from pytest_modelbench.record_integrity import SealProblem, check_seal, load, record_key, sealed
from pytest_modelbench.report import json_text, results_document
from pytest_modelbench.run.sharding import Shard

if TYPE_CHECKING:  # merge_project.py imports pytest; the merge only reads what it found
    from pytest_modelbench.pytest_plugin.merge_project import ProjectGate

FORMAT = "pytest-modelbench-run-record/2"
FINISHED = (0, 1)  # pytest's exit statuses of a run that ran all its items: passed, some failed
MAX_SHARDS = 10_000
OUTCOMES = ("passed", "failed", "skipped")
FAILED_STATUSES = (STATUS_MISSING, STATUS_INVALID, STATUS_REBASELINE, STATUS_POLICY)  # failed without a comparison
SESSION_FIELDS = {  # what every shard of one session shares, and how a refusal names it
    "tasks": "gated tasks or their configs",
    "alpha_split": "split of alpha (the number of tasks sharing it, their weights)",
    "gate": "gate settings",
    "baselines": "baselines",
    "options": "run options",
    "packages": "package versions",
}
PROJECT_FIELDS = ("tasks", "alpha_split", "gate", "baselines")  # what the merging project decides itself


class RunRecordError(ModelbenchError):
    """Run records that cannot be merged into one verdict; the message names the records."""


@dataclass(frozen=True)
class RecordedResult:
    result: GateResult  # as the shard stated it
    candidate: str | None  # the evidence: the candidate's record text, when its task was scored in full
    documents: list[Any] | None  # its documents, where a metric aggregates over them (gate/rejudge.py)


@dataclass(frozen=True)
class RunRecord:
    path: Path
    shard: Shard
    session: Mapping[str, Any]
    tasks: Mapping[str, str]  # the gated tasks this shard ran: '<suite>/<task>' key → node id
    outcomes: Mapping[str, str]  # every item it ran: node id → passed | failed | skipped
    exit_status: int
    results: tuple[RecordedResult, ...]
    scores: tuple[Mapping[str, Any], ...]  # each task's results (report.py, task_results)
    custom_tests: tuple[str, ...]
    unused: tuple[str, ...]  # unused baselines, as shown (relative to the rootdir)
    run_config: Mapping[str, Any]

    @property
    def name(self) -> str:
        return f"{self.path} (shard {self.shard.label})"

    @property
    def session_id(self) -> str:
        return session_id(self.session)


def session_id(session: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(session, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def record_text(*, shard: Shard, session: Mapping[str, Any], tasks: Mapping[str, str], exit_status: int,
                results: Iterable[GateResult], evidence: Mapping[str, Mapping[str, Any]], outcomes: Mapping[str, str],
                scores: Iterable[Mapping[str, Any]], custom_tests: Iterable[str], unused: Iterable[str],
                run_config: Mapping[str, Any]) -> str:
    """The record's text, sealed (signed with MODELBENCH_RECORD_KEY when it is set). `evidence`: each gated item's
    candidate record and, for metrics aggregated over the documents, its documents, by node id."""
    document = {
        "format": FORMAT, "shard": {"index": shard.index, "count": shard.count}, "session_id": session_id(session),
        "session": session, "tasks": dict(sorted(tasks.items())), "items": dict(sorted(outcomes.items())),
        "exit_status": int(exit_status),
        "results": [{"nodeid": r.nodeid, "failed": r.failed, "properties": properties(r),
                     "candidate": evidence.get(r.nodeid, {}).get("candidate"),
                     "documents": evidence.get(r.nodeid, {}).get("documents")}
                    for r in sorted(results, key=lambda r: r.task)],
        "scores": sorted(scores, key=lambda s: s["key"]), "custom_tests": sorted(custom_tests),
        "unused": sorted(unused), "run_config": run_config,
    }
    return json_text(sealed(document, record_key()))


class _Malformed(Exception):
    """A key of a record with a wrong or missing value (the message names the key)."""


_KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true or false"}


def _get(mapping: Any, key: str | int, kind: type, where: str) -> Any:
    label = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key
    if isinstance(key, int):
        value = mapping[key]
    elif key not in mapping:
        raise _Malformed(f"key {label!r} is missing")
    else:
        value = mapping[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Malformed(f"key {label!r} must be {_KINDS[kind]}, not {type(value).__name__}")
    return value


def _strings(mapping: Any, key: str, where: str = "") -> dict[str, str]:
    value = _get(mapping, key, dict, where)
    bad = next((k for k, v in value.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise _Malformed(f"key {key}[{bad!r}] must be a string")
    return value


def _list_of(mapping: Any, key: str, kind: type, where: str = "") -> list[Any]:
    value = _get(mapping, key, list, where)
    for index in range(len(value)):
        _get(value, index, kind, f"{where}.{key}" if where else key)
    return value


def read_record(path: Path) -> RunRecord:
    """The record at `path`, its seal checked; RunRecordError naming the record and the key for anything else."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RunRecordError(f"{path}: no such run record") from None
    except OSError as exc:
        raise RunRecordError(f"{path}: not a readable run record ({exc.strerror or exc})") from None
    try:
        raw = load(data)
    except SealProblem as exc:
        raise RunRecordError(f"{path}: not a readable run record: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise RunRecordError(f"{path}: not a run record of this version (format {found!r}, expected {FORMAT!r}); "
                             "write it again with this pytest-modelbench")
    try:
        check_seal(raw, record_key())
    except SealProblem as exc:
        raise RunRecordError(f"{path}: {exc}") from None
    try:
        return _record(path, raw)
    except _Malformed as exc:
        raise RunRecordError(f"{path}: run record is malformed: {exc}; write it again by re-running its shard") \
            from None


def _record(path: Path, raw: dict[str, Any]) -> RunRecord:
    shard_raw = _get(raw, "shard", dict, "")
    shard = Shard(_get(shard_raw, "index", int, "shard"), _get(shard_raw, "count", int, "shard"))
    if not 1 <= shard.index <= shard.count <= MAX_SHARDS:
        raise _Malformed(f"key 'shard' must be K of N with 1 <= K <= N <= {MAX_SHARDS}, not {shard.label}")
    session = _get(raw, "session", dict, "")
    if set(session) != set(SESSION_FIELDS):
        raise _Malformed(f"key 'session' must hold {', '.join(SESSION_FIELDS)}")
    _strings(session, "tasks", "session")
    outcomes = _strings(raw, "items")
    bad = next((nodeid for nodeid, outcome in outcomes.items() if outcome not in OUTCOMES), None)
    if bad is not None:
        raise _Malformed(f"key items[{bad!r}] must be one of {', '.join(OUTCOMES)}")
    results = []
    for index, entry in enumerate(_list_of(raw, "results", dict)):
        where = f"results[{index}]"
        nodeid, failed = _get(entry, "nodeid", str, where), _get(entry, "failed", bool, where)
        pairs = _list_of(entry, "properties", list, where)
        candidate, documents = entry.get("candidate"), entry.get("documents")
        if candidate is not None and not isinstance(candidate, str):
            raise _Malformed(f"key '{where}.candidate' must be a string or null")
        if documents is not None and not isinstance(documents, list):
            raise _Malformed(f"key '{where}.documents' must be a list or null")
        try:
            result = GateResult.from_properties([(str(name), str(value)) for name, value in pairs], nodeid, failed)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _Malformed(f"key '{where}.properties' is not a gate result ({type(exc).__name__}: {exc})") from None
        if result is None:
            raise _Malformed(f"key '{where}.properties' holds no gate result")
        results.append(RecordedResult(result, candidate, documents))
    scores = _list_of(raw, "scores", dict)
    for index, score in enumerate(scores):
        _get(score, "key", str, f"scores[{index}]")
        for row in _list_of(score, "rows", list, f"scores[{index}]"):
            if not all(isinstance(cell, str) for cell in row):
                raise _Malformed(f"key 'scores[{index}].rows' must hold rows of strings")
    return RunRecord(
        path=path, shard=shard, session=session, tasks=_strings(raw, "tasks"), outcomes=outcomes,
        exit_status=_get(raw, "exit_status", int, ""), results=tuple(results), scores=tuple(scores),
        custom_tests=tuple(_list_of(raw, "custom_tests", str)), unused=tuple(_list_of(raw, "unused", str)),
        run_config=_get(raw, "run_config", dict, ""),
    )


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
        a baseline is unused; a shard exited 1: a record's own status can raise the merge's, never lower it), else 0.
        The reports head with the same outcome."""
        return EXIT_STATUS_FAIL if self.failed or self.decision.outcome().failed else 0

    def results_json(self) -> str:
        return json_text(results_document(self.scores, dict(self.records[0].run_config),
                                          self.decision.outcomes_json(), self.decision.pooled_json(),
                                          self.decision.outcome_json()))


def merge(records: Sequence[RunRecord], project: "ProjectGate") -> MergedSession:
    """The records' session judged by `project` (merge_project.ProjectGate: this checkout's gate), or
    RunRecordError naming the records that cannot be merged."""
    if not records:
        raise RunRecordError("no run records to merge")
    _check_shards(records)
    _check_session(records)
    _check_project(records, project)
    _check_tasks(records)
    unfinished = [r for r in records if r.exit_status not in FINISHED]
    if unfinished:
        raise RunRecordError(
            "shards that did not finish cannot give a verdict: "
            + ", ".join(f"{r.name} exited {r.exit_status}" for r in unfinished)
            + "; re-run them (pytest's exit status: 2 interrupted, 3 internal error, 4 usage error)"
        )
    policy = project.policy
    decision = SessionDecision(policy.baseline_name, pooled_weights=dict(project.split.pooled),
                               error_control=policy.error_control, early_stop_verdicts=policy.early_stop_verdicts,
                               pytest_status=max(record.exit_status for record in records))
    failed = False
    for record in records:
        _check_scored(record)
        results, task_failed = _judged(record, project)
        decision.results.extend(results)
        failed = failed or task_failed
        decision.custom_tests.update(record.custom_tests)
        decision.unused.update(record.unused)
        decision.failed_tests.update(nodeid for nodeid, outcome in record.outcomes.items() if outcome == "failed")
        failed = failed or any(record.outcomes.get(nodeid) == "failed" for nodeid in record.custom_tests)
    _check_checkpoint(records, decision.results)
    scores = sorted((s for r in records for s in r.scores), key=lambda s: s["key"])
    return MergedSession(tuple(records), decision, scores, failed)


def _check_project(records: Sequence[RunRecord], project: "ProjectGate") -> None:
    """The records (one session, checked before) are of this project's session: the plan, the split of alpha, the
    gate settings and the baselines this checkout and the merge's options give."""
    if project.policy.score_only:
        raise RunRecordError("--score-only runs no gate: a merge gives a verdict (drop --score-only after --)")
    session = records[0].session
    for key in PROJECT_FIELDS:
        if json.dumps(session[key], sort_keys=True) != json.dumps(project.session[key], sort_keys=True):
            raise RunRecordError(
                f"the records are not of this project's session: their {SESSION_FIELDS[key]} differ from this "
                f"checkout's ({_first_difference(session[key], project.session[key])}; records: {_names(records)}); "
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


def _judged(record: RunRecord, project: "ProjectGate") -> tuple[list[GateResult], bool]:
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
        results.append(_recomputed(where, recorded, project))
        failed = failed or results[-1].failed or outcome == "failed"
    return results, failed


def _recomputed(where: str, recorded: RecordedResult, project: "ProjectGate") -> GateResult:
    store, policy, result = project.store, project.policy, recorded.result
    path = store.path(project.identities[result.task])
    stored_text, working_tree_differs = store.read(path)
    try:
        return rejudge(result, str(recorded.candidate), stored_text, documents=recorded.documents,
                       tolerance=project.tolerances[result.task],
                       baseline_display=store.display(path), baseline_name=policy.baseline_name,
                       baseline_ref=None if policy.baseline_ref is None else policy.baseline_ref.ref,
                       working_tree_differs=working_tree_differs)
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
