"""Run records and their merge: one verdict from a session run as shards on many machines.

A shard (`pytest --shard K/N --run-record PATH`) writes what the session's decision needs from it: each gated task's
gate result (entries, p-values, provenance) and scores, its custom tests, the unused baselines it found, its exit
status, and the session it belongs to (`session`: every gated task of the whole session with its config hash, how
alpha is split (the number of tasks sharing it, their weights), the gate settings, a digest of the baselines read,
the options that change numbers, the package versions, N). Every shard judges its own tasks at their shares of the
whole session's alpha, so a task's verdict is the one an unsharded run gives it (gate/decision.py); the merge checks
that the records are the complete, consistent shards of one session and makes the session's decision and reports
from them, as the one process would.

It fails closed: a missing shard, a shard given twice, a task in two shards, records of different sessions (tasks,
configs, task weights, gate settings, baselines, options, package versions), of different checkpoints (the model
weights' fingerprints in the tasks' provenance), or a shard that did not finish (interrupted, internal or usage
error) is refused, and the refusal names the records.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.decision import EXIT_STATUS_FAIL, SessionDecision
from pytest_modelbench.gate.report import GateResult, properties
from pytest_modelbench.report import json_text, results_document
from pytest_modelbench.sharding import Shard

FORMAT = "pytest-modelbench-run-record/1"
FINISHED = (0, 1)  # pytest's exit statuses of a run that ran all its items: passed, some failed
SESSION_FIELDS = {  # what every shard of one session shares, and how a refusal names it
    "tasks": "gated tasks or their configs",
    "alpha_split": "split of alpha (the number of tasks sharing it, their weights)",
    "gate": "gate settings",
    "baselines": "baselines",
    "options": "run options",
    "packages": "package versions",
}


class RunRecordError(ModelbenchError):
    """Run records that cannot be merged into one verdict; the message names the records."""


@dataclass(frozen=True)
class RunRecord:
    path: Path
    shard: Shard
    session: Mapping[str, Any]
    tasks: tuple[str, ...]  # the gated tasks this shard ran, by '<suite>/<task>' key
    exit_status: int
    results: tuple[GateResult, ...]
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

    @property
    def model_fingerprints(self) -> set[str]:
        return {str(r.candidate_provenance["model_fingerprint"]) for r in self.results
                if r.candidate_provenance and r.candidate_provenance.get("model_fingerprint")}


def session_id(session: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(session, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def record_text(*, shard: Shard, session: Mapping[str, Any], tasks: Sequence[str], exit_status: int,
                results: Iterable[GateResult], scores: Iterable[Mapping[str, Any]], custom_tests: Iterable[str],
                unused: Iterable[str], run_config: Mapping[str, Any]) -> str:
    document = {
        "format": FORMAT, "shard": {"index": shard.index, "count": shard.count}, "session_id": session_id(session),
        "session": session, "tasks": sorted(tasks), "exit_status": int(exit_status),
        "results": [{"nodeid": r.nodeid, "failed": r.failed, "properties": properties(r)}
                    for r in sorted(results, key=lambda r: r.task)],
        "scores": sorted(scores, key=lambda s: s["key"]), "custom_tests": sorted(custom_tests),
        "unused": sorted(unused), "run_config": run_config,
    }
    return json_text(document)


def read_record(path: Path) -> RunRecord:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunRecordError(f"{path}: no such run record") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunRecordError(f"{path}: not a readable run record ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise RunRecordError(f"{path}: not a run record of this version (format {found!r}, expected {FORMAT!r}); "
                             "write it again with this pytest-modelbench")
    try:
        shard = Shard(int(raw["shard"]["index"]), int(raw["shard"]["count"]))
        results = tuple(
            GateResult.from_properties([tuple(pair) for pair in r["properties"]], r["nodeid"], bool(r["failed"]))
            for r in raw["results"]
        )
        record = RunRecord(
            path=path, shard=shard, session=raw["session"], tasks=tuple(raw["tasks"]),
            exit_status=int(raw["exit_status"]), results=tuple(r for r in results if r is not None),
            scores=tuple(raw["scores"]), custom_tests=tuple(raw["custom_tests"]), unused=tuple(raw["unused"]),
            run_config=raw["run_config"],
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RunRecordError(f"{path}: run record is incomplete or hand-edited ({type(exc).__name__}: {exc}); "
                             "write it again by re-running its shard") from None
    if set(record.session) != set(SESSION_FIELDS) or not 1 <= shard.index <= shard.count:
        raise RunRecordError(f"{path}: run record is incomplete or hand-edited (session or shard fields); "
                             "write it again by re-running its shard")
    return record


@dataclass
class MergedSession:
    """The session's decision and reports from its shards' records."""

    records: tuple[RunRecord, ...]
    decision: SessionDecision
    scores: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """As the one process would exit: 1 when the decision's outcome fails (a task or test failed, a suite's
        pooled entry regressed (judged here, as no shard saw all of a suite's tasks), a baseline is unused), else 0;
        the reports head with the same outcome."""
        return EXIT_STATUS_FAIL if self.decision.outcome().failed else 0

    def results_json(self) -> str:
        return json_text(results_document(self.scores, dict(self.records[0].run_config),
                                          self.decision.outcomes_json(), self.decision.pooled_json(),
                                          self.decision.outcome_json()))


def merge(records: Sequence[RunRecord]) -> MergedSession:
    """The records' session, or RunRecordError naming the records that cannot be merged."""
    if not records:
        raise RunRecordError("no run records to merge")
    _check_shards(records)
    _check_checkpoint(records)
    _check_session(records)
    _check_tasks(records)
    unfinished = [r for r in records if r.exit_status not in FINISHED]
    if unfinished:
        raise RunRecordError(
            "shards that did not finish cannot give a verdict: "
            + ", ".join(f"{r.name} exited {r.exit_status}" for r in unfinished)
            + "; re-run them (pytest's exit status: 2 interrupted, 3 internal error, 4 usage error)"
        )
    first = records[0]
    gate = first.session["gate"]
    decision = SessionDecision(str(gate["baseline_name"]), score_only=bool(gate["score_only"]),
                               pooled_weights=dict(first.session["alpha_split"].get("pooled", {})),
                               error_control=str(gate["error_control"]),
                               early_stop_verdicts=bool(gate.get("early_stop_verdicts", False)),
                               pytest_status=max(record.exit_status for record in records))
    for record in records:
        decision.results.extend(record.results)
        decision.custom_tests.update(record.custom_tests)
        decision.unused.update(record.unused)
    scores = sorted((s for r in records for s in r.scores), key=lambda s: s["key"])
    return MergedSession(tuple(records), decision, scores)


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


def _check_checkpoint(records: Sequence[RunRecord]) -> None:
    fingerprints: dict[str, list[RunRecord]] = {}
    for record in records:
        for fingerprint in sorted(record.model_fingerprints):
            fingerprints.setdefault(fingerprint, []).append(record)
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
    missing = sorted(expected - set(ran))
    if missing:
        raise RunRecordError(f"task{'s' if len(missing) > 1 else ''} {', '.join(missing)} of the session ran in no "
                             f"shard (given: {_names(records)})")
