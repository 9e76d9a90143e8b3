"""Re-scoring from a run record (--rescore-from): what a run records of its model's outputs, and the backend that
answers a task's requests from them, so that today's filters and metrics re-score a past run without its model.

A run record (outputs/run_record.py) holds, per scored task (keyed `<task file, from the rootdir>::<task name>`; a
group's override of a task is a variant of its own), each document's id, a digest of its prompt, a digest of
everything it asked of the model (prompt, choices or target, generation settings) and what the model answered
(`task_outputs`): per choice a log-likelihood (multiple_choice), a log-likelihood and its greedy flag
(loglikelihood), one log-likelihood (loglikelihood_rolling), or the raw generation, before any filter, a sampled
task's `repeats` draws as a list of them (generate_until); and the documents the run left unscored (docs/integrity.md), each with why: they are replayed
unscored, so the task's integrity limits judge the re-scored run as they judged the recorded one. `ReplayBackend`
answers a task only when every document's requests are the recorded ones;
otherwise it refuses, naming the task and the first document whose prompt or requests differ. A change confined to
filters, metrics, the gold answers or the gate replays. It describes itself as the recorded backend did, so the
candidate's provenance is the recorded run's, and it has no score cache: nothing is read from or written to one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.numeric import is_number
from pytest_modelbench.scoring.backend import BackendInfo, Unscored
from pytest_modelbench.scoring.front import (
    document_requests, generation_requests, rolling_requests, target_requests, task_name,
)

OUTPUT_KINDS = {  # what a document's recorded output is, by output type
    "multiple_choice": "a list of numbers (one log-likelihood per choice)",
    "loglikelihood": "a [number, true or false] pair (log-likelihood, greedy)",
    "loglikelihood_rolling": "a number (the text's log-likelihood)",
    "generate_until": "a string (the raw generation), or a sampled task's list of draws",
}


class RescoreError(ModelbenchError):
    """A run record that cannot answer what a task asks now; the message names the record, task and document."""


def task_key(config: Any, root: Path) -> str:
    """A task's key in the record: its YAML's path from the rootdir (as is when outside it) and its name."""
    source = Path(config.source).resolve()
    try:
        shown = source.relative_to(root.resolve()).as_posix()
    except ValueError:
        shown = source.as_posix()
    return f"{shown}::{config.task}"


def request_digests(prepared: Any) -> list[tuple[str, str]]:
    """Per document: a digest of its prompt, and one of every request it sends (as the front builds them)."""
    output_type = prepared.config.output_type
    if output_type == "generate_until":
        draws = prepared.config.draws
        asked = generation_requests(prepared)
        requests = [_drawn(asked[d * draws:(d + 1) * draws]) for d in range(len(prepared.documents))]
        prompts = [request["context"] for request in requests]
        return [(_digest(prompt), _digest(request)) for prompt, request in zip(prompts, requests)]
    if output_type == "loglikelihood_rolling":
        requests = rolling_requests(prepared)
        prompts = [request.text for request in requests]
    elif output_type == "loglikelihood":
        requests = target_requests(prepared)
        prompts = [request.context for request in requests]
    else:
        requests = document_requests(prepared)
        prompts = [request.context for request in requests]
    return [(_digest(prompt), _digest(dataclasses.asdict(request))) for prompt, request in zip(prompts, requests)]


def _drawn(requests: Sequence[Any]) -> dict[str, Any]:
    """A document's generation requests as its digest covers them: greedy, the one request as it always was; sampled,
    the first with the number of draws (the seed is in it: other draws are other requests)."""
    request = dataclasses.asdict(requests[0])
    del request["draw"]
    if not requests[0].settings.sampling:
        del request["seed"]
        return request
    return {**request, "draws": len(requests)}


def task_outputs(prepared: Any, loglikelihoods: Sequence[Sequence[float]], generations: Sequence[str] | None,
                 greedy: Sequence[bool] | None, unscored: Sequence[tuple[int, str]] = ()) -> dict[str, Any]:
    """A task's documents and the model's outputs for them, as a run record holds them (an evaluation's scored
    documents, loglikelihoods, generations and greedy flags: run/evaluation.py), and the documents its run left
    unscored, each with why (`unscored`: document id, why)."""
    output_type = prepared.config.output_type
    if output_type == "generate_until":
        outputs: list[Any] = list(generations or ())
    elif output_type == "loglikelihood":
        outputs = [[float(values[0]), bool(flag)] for values, flag in zip(loglikelihoods, greedy or ())]
    elif output_type == "loglikelihood_rolling":
        outputs = [float(values[0]) for values in loglikelihoods]
    else:
        outputs = [[float(value) for value in values] for values in loglikelihoods]
    return {"output_type": output_type,
            "documents": [[doc.doc_id, prompt, request, output] for doc, (prompt, request), output
                          in zip(prepared.documents, request_digests(prepared), outputs)],
            **({"unscored": [[doc_id, why] for doc_id, why in unscored]} if unscored else {})}


@dataclass(frozen=True)
class RecordedDocument:
    prompt: str  # digest of its prompt
    request: str  # digest of all it asked
    output: Any


@dataclass(frozen=True)
class RecordedTask:
    output_type: str
    documents: Mapping[int, RecordedDocument]  # by document id
    record: str  # the run record it came from, for messages
    unscored: Mapping[int, str] = dataclasses.field(default_factory=dict)  # documents its run left unscored: why


@dataclass(frozen=True)
class RecordedOutputs:
    """What run records hold of their model's outputs: the backend that gave them and each task's documents."""

    backend: BackendInfo
    tasks: Mapping[str, tuple[RecordedTask, ...]]  # task key → its variants

    @classmethod
    def from_json(cls, raw: Any, record: str) -> "RecordedOutputs":
        """A record's `outputs` value; RescoreError naming the record and the key of anything malformed."""
        if not isinstance(raw, dict):
            raise RescoreError(f"{record}: holds no model outputs to re-score (key 'outputs'): its run scored no "
                               "task, or an older pytest-modelbench wrote it; record the run again with --run-record")
        try:
            info = BackendInfo(**raw.get("backend"))
        except TypeError:
            info = None
        texts = ("name", "fingerprint", "model_type", "dtype", "device")
        if info is None or not all(isinstance(getattr(info, name), str) for name in texts) \
                or not isinstance(info.scorer_kwargs, dict):
            raise RescoreError(f"{record}: key 'outputs.backend' is not a backend's description")
        tasks = raw.get("tasks")
        if not isinstance(tasks, dict):
            raise RescoreError(f"{record}: key 'outputs.tasks' must be an object")
        found = {}
        for key, variants in tasks.items():
            where = f"outputs.tasks[{key!r}]"
            found[key] = tuple(_recorded_task(variant, record, f"{where}[{index}]")
                               for index, variant in enumerate(_list(variants, record, where)))
        return cls(info, found)

    def joined(self, other: "RecordedOutputs", record: str) -> "RecordedOutputs":
        """These outputs and `other`'s (another shard's record, `record`), from one backend."""
        if other.backend != self.backend:
            raise RescoreError(f"{record}: its outputs are from another backend ({_shown(other.backend)}) than the "
                               f"other records' ({_shown(self.backend)}); re-score one run at a time")
        tasks = dict(self.tasks)
        for key, variants in other.tasks.items():
            tasks[key] = tasks.get(key, ()) + variants
        return RecordedOutputs(self.backend, tasks)


class ReplayBackend:
    """A backend (scoring/backend.py, Backend) answering each task from recorded outputs; `root`: the rootdir task
    keys are relative to."""

    def __init__(self, recorded: RecordedOutputs, root: Path):
        self.recorded = recorded
        self.root = root

    def describe(self) -> BackendInfo:
        return self.recorded.backend

    def score_task(self, prepared) -> list[float]:
        return [value for doc, values in zip(prepared.documents, self._outputs(prepared))
                for value in ([values] * len(doc.continuations) if isinstance(values, Unscored) else values)]

    def loglikelihood_task(self, prepared) -> list[tuple[float, bool]]:
        return [output if isinstance(output, Unscored) else (output[0], output[1])
                for output in self._outputs(prepared)]

    def rolling_loglikelihood_task(self, prepared) -> list[float]:
        return list(self._outputs(prepared))

    def generate_task(self, prepared) -> list[str]:
        draws = prepared.config.draws
        return [draw for output in self._outputs(prepared)
                for draw in ([output] * draws if isinstance(output, (str, Unscored)) else output)]

    def loglikelihood(self, requests: Sequence[tuple[str, str]], **_: Any) -> list[float]:
        raise RescoreError("--rescore-from answers only the requests of the tasks its run record scored; a custom "
                           "test's own requests (modelbench_model.loglikelihood) need the model: run it without "
                           "--rescore-from")

    def _outputs(self, prepared) -> list[Any]:
        """Each document's recorded output, when every document asks what it asked in the recorded run; `Unscored`
        where that run left the document unscored (it stays so, and the task's integrity limits apply again)."""
        config = prepared.config
        variants = self.recorded.tasks.get(task_key(config, self.root), ())
        if not variants:
            raise RescoreError(f"{task_name(prepared)}: not scored in the recorded run (no outputs under "
                               f"'{task_key(config, self.root)}'); score it with the model (without --rescore-from)")
        digests = request_digests(prepared)
        problems = []
        for variant in variants:
            problem = _difference(prepared, digests, variant)
            if problem is None:
                return [Unscored(f"unscored in the run recorded in {variant.record}: {variant.unscored[doc.doc_id]}")
                        if doc.doc_id in variant.unscored else variant.documents[doc.doc_id].output
                        for doc in prepared.documents]
            problems.append(problem)
        raise RescoreError(f"{task_name(prepared)}, {problems[0]}; --rescore-from replays the model's outputs only "
                           "for the requests they answered: score this task with the model (without --rescore-from)")


def _difference(prepared, digests: Sequence[tuple[str, str]], variant: RecordedTask) -> str | None:
    """What differs between the task's requests now and a recorded variant's, first document first; None: nothing."""
    record = variant.record
    if variant.output_type != prepared.config.output_type:
        return (f"output_type: {prepared.config.output_type} now, {variant.output_type} in {record} (its requests "
                "are of another kind)")
    for doc, (prompt, request) in zip(prepared.documents, digests):
        recorded = variant.documents.get(doc.doc_id)
        if recorded is None and doc.doc_id in variant.unscored:
            continue  # nothing of it to replay: it stays unscored
        if recorded is None:
            return (f"document {doc.doc_id}: not scored in the run recorded in {record} (it scored "
                    f"{len(variant.documents)} documents of this task)")
        if recorded.prompt != prompt:
            return (f"document {doc.doc_id}: its prompt differs from the one recorded in {record} (doc_to_text, "
                    "the few-shot examples, a description, delimiter or template changed)")
        if recorded.request != request:
            return (f"document {doc.doc_id}: its requests differ from the ones recorded in {record} (its choices, "
                    "target or generation settings changed)")
    return None


def _recorded_task(raw: Any, record: str, where: str) -> RecordedTask:
    output_type = raw.get("output_type") if isinstance(raw, dict) else None
    if not isinstance(output_type, str) or output_type not in OUTPUT_KINDS:
        raise RescoreError(f"{record}: key '{where}' must hold an output_type ({', '.join(OUTPUT_KINDS)}) and "
                           "documents")
    documents = {}
    for index, entry in enumerate(_list(raw.get("documents"), record, f"{where}.documents")):
        shape = isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], int) \
            and isinstance(entry[1], str) and isinstance(entry[2], str)
        if not shape or not _output_fits(output_type, entry[3]):
            raise RescoreError(f"{record}: key '{where}.documents[{index}]' must be [document id, prompt digest, "
                               f"request digest, output], the output {OUTPUT_KINDS[output_type]}")
        documents[entry[0]] = RecordedDocument(entry[1], entry[2], entry[3])
    unscored = {}
    for index, entry in enumerate(_list(raw.get("unscored", []), record, f"{where}.unscored")):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)
                and not isinstance(entry[0], bool) and isinstance(entry[1], str)):
            raise RescoreError(f"{record}: key '{where}.unscored[{index}]' must be [document id, why it is unscored]")
        unscored[entry[0]] = entry[1]
    return RecordedTask(output_type, documents, record, unscored)


def _output_fits(output_type: str, output: Any) -> bool:
    if output_type == "generate_until":
        return isinstance(output, str) or (isinstance(output, list) and all(isinstance(draw, str) for draw in output))
    if output_type == "loglikelihood_rolling":
        return is_number(output)
    if output_type == "loglikelihood":
        return isinstance(output, list) and len(output) == 2 and is_number(output[0]) and isinstance(output[1], bool)
    return isinstance(output, list) and all(is_number(value) for value in output)


def _list(value: Any, record: str, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise RescoreError(f"{record}: key '{where}' must be a list")
    return value


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _shown(info: BackendInfo) -> str:
    return f"model '{info.name}', weights {info.fingerprint}"
