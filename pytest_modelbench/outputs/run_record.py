"""Run records: what a shard (`pytest --shard K/N --run-record PATH`) writes for the merge of its session, and how it
is read back.

A record holds what the session's decision needs from its shard: the session it belongs to (`session`: every gated
task of the whole session with its config hash, how alpha is split, the gate settings, a digest of the baselines
read, the options that change numbers, the package versions), the gated tasks it ran (key → node id), the outcome of
every item it ran, each gated task's gate result with its EVIDENCE (the candidate's record, the BaselineRecord its
gate compared with the stored baseline, as the baseline store writes it), the tasks' scores, the unused baselines it
found and its exit status; sealed with a digest of its content and, with MODELBENCH_RECORD_KEY, a signature
(outputs/record_integrity.py). Reading a record checks its seal and every key's type, and names the record and the
key of anything wrong; the merge of the records into one verdict is outputs/record_merge.py.
It also holds the model's outputs of each task it scored (`outputs`), which --rescore-from replays (scoring/replay.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.result import GateResult
from pytest_modelbench.outputs.record_integrity import SealProblem, check_seal, load, record_key, sealed
from pytest_modelbench.outputs.result_properties import properties, result_from_properties
from pytest_modelbench.outputs.results import json_text
from pytest_modelbench.run.sharding import Shard

FORMAT = "pytest-modelbench-run-record/2"
MAX_SHARDS = 10_000
OUTCOMES = ("passed", "failed", "skipped")
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
class RecordedResult:
    result: GateResult  # as the shard stated it
    candidate: str | None  # the evidence: the candidate's record text, when its task was scored in full
    documents: list[Any] | None  # its documents, where a metric aggregates over them (gate/rejudge.py)
    clusters: list[str | None] | None = None  # its documents' declared clusters, which the record text does not carry


@dataclass(frozen=True)
class RunRecord:
    path: Path
    shard: Shard
    session: Mapping[str, Any]
    tasks: Mapping[str, str]  # the gated tasks this shard ran: '<suite>/<task>' key → node id
    outcomes: Mapping[str, str]  # every item it ran: node id → passed | failed | skipped
    exit_status: int
    results: tuple[RecordedResult, ...]
    scores: tuple[Mapping[str, Any], ...]  # each task's results (outputs/results.py, task_results)
    custom_tests: tuple[str, ...]
    unused: tuple[str, ...]  # unused baselines, as shown (relative to the rootdir)
    run_config: Mapping[str, Any]
    outputs: Mapping[str, Any] | None = None  # the model's outputs per task, for --rescore-from (scoring/replay.py)

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
                run_config: Mapping[str, Any], outputs: Mapping[str, Any] | None = None) -> str:
    """The record's text, sealed (signed with MODELBENCH_RECORD_KEY when it is set). `evidence`: each gated item's
    candidate record and, for metrics aggregated over the documents, its documents, by node id. `outputs`: the
    model's outputs of the tasks scored (scoring/replay.py), for --rescore-from."""
    document = {
        "format": FORMAT, "shard": {"index": shard.index, "count": shard.count}, "session_id": session_id(session),
        "session": session, "tasks": dict(sorted(tasks.items())), "items": dict(sorted(outcomes.items())),
        "exit_status": int(exit_status),
        "results": [{"nodeid": r.nodeid, "failed": r.failed, "properties": properties(r),
                     "candidate": evidence.get(r.nodeid, {}).get("candidate"),
                     "clusters": evidence.get(r.nodeid, {}).get("clusters"),
                     "documents": evidence.get(r.nodeid, {}).get("documents")}
                    for r in sorted(results, key=lambda r: r.task)],
        "scores": sorted(scores, key=lambda s: s["key"]), "custom_tests": sorted(custom_tests),
        "unused": sorted(unused), "run_config": run_config,
    }
    if outputs is not None:
        document["outputs"] = outputs
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
        clusters = entry.get("clusters")  # absent from records of earlier versions
        if clusters is not None and not (isinstance(clusters, list)
                                         and all(c is None or isinstance(c, str) for c in clusters)):
            raise _Malformed(f"key '{where}.clusters' must be a list of strings (or nulls) or null")
        try:
            result = result_from_properties([(str(name), str(value)) for name, value in pairs], nodeid, failed)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _Malformed(f"key '{where}.properties' is not a gate result ({type(exc).__name__}: {exc})") from None
        if result is None:
            raise _Malformed(f"key '{where}.properties' holds no gate result")
        results.append(RecordedResult(result, candidate, documents, clusters))
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
        run_config=_get(raw, "run_config", dict, ""), outputs=raw.get("outputs"),
    )
