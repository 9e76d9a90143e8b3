"""Integrity before quality: whether a task's run is whole enough to judge the model on (docs/integrity.md).

The run layer counts, per task, the documents it could not score (a request that still failed after the backend's
retries: scoring/backend.py `Unscored`), the answers no filter could parse (a generate_until task's parsing
pipelines all answered their fallback: tasks/filters.py `invalid_outputs`) and the requests re-sent
(`TaskIntegrity`), and whether the backend raised while scoring it (scoring/backend.py `BackendRaised`). A task
whose backend raised, or whose unscored share (overall, or in any category) or invalid-output share is over its
limits (`IntegrityLimits`: the command line's, else the YAML's `modelbench.gate`, else the defaults) is in `error`:
the run, not the model. Its quality is not judged at all, so no verdict, pass or fail, comes from part of its
documents. A run about to write a task's baseline (gate/judge.py) must have scored every document: a baseline is
recorded from whole runs only; one whose baseline exists and is not rewritten is judged as a plain run.

Documents left unscored within the limits are dropped from both sides of the paired evidence (`paired_baseline`):
each entry compares the candidate's scored documents with the baseline's values on the same documents, as a paired
test must.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pytest_modelbench.gate.baseline import BaselineRecord
from pytest_modelbench.gate.early_stop import restricted
from pytest_modelbench.tasks.filters import INVALID_OUTPUT

# 1%: a paired delta over the scored documents differs from the whole task's by at most about the unscored share
# (for values in [0, 1]), so at this share even documents lost adversarially move an entry by about one default
# margin (one point); random losses move it far less. docs/integrity.md.
DEFAULT_MAX_UNSCORED = 0.01
# No limit: an answer no filter parses is the model's answer, and the gated invalid_output entry shows a format break
# as a regression, with its reason. A limit makes a share above it the run's fault (e.g. a template known to parse).
DEFAULT_MAX_INVALID = 1.0
EXAMPLES = 3  # example documents per kind in a report
# The command line's keys (gate/policy.py overrides) and their options
LIMIT_OPTIONS = {"--max-unscored": "max_unscored", "--max-invalid": "max_invalid"}


@dataclass(frozen=True)
class DocumentProblem:
    """One document the run could not use: its id and category, and what went wrong (why it is unscored, or the
    generation no filter could parse)."""

    doc_id: int
    category: str | None
    problem: str

    def as_json(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "category": self.category, "problem": self.problem}


@dataclass(frozen=True)
class TaskIntegrity:
    """What a task's run could not score or parse. `categories`: the task's documents per category (scored or not);
    `invalid_flags`: per scored document, in order, whether no filter could parse its answer (None: the task has no
    parsing filter); `unscored_keys`: the unscored documents' keys (tasks/requests.py `DocumentRequests.key`, numbered
    over every document); `backend_failure`: the exception the backend raised while scoring it, in words (None: it
    did not raise)."""

    documents: int
    categories: Mapping[str, int] = field(default_factory=dict)
    unscored: tuple[DocumentProblem, ...] = ()
    unscored_keys: tuple[str, ...] = ()
    retried: int = 0
    invalid: tuple[DocumentProblem, ...] = ()
    invalid_flags: tuple[bool, ...] | None = None
    backend_failure: str | None = None

    @property
    def scored(self) -> int:
        return self.documents - len(self.unscored)

    def summary(self) -> str:
        """One line: "retried 14 requests, 3 of 200 documents unscored, 5 of 197 answers no filter could parse"."""
        parts = [f"retried {self.retried} request{'s' * (self.retried != 1)}"]
        parts.append(f"{len(self.unscored)} of {self.documents} documents unscored")
        if self.invalid_flags is not None:
            parts.append(f"{len(self.invalid)} of {self.scored} answers no filter could parse")
        if self.backend_failure is not None:
            parts.append(self.backend_failure)
        return ", ".join(parts)

    def as_json(self) -> dict[str, Any]:
        by_category = {category: {"documents": total,
                                  "unscored": sum(p.category == category for p in self.unscored),
                                  "invalid_outputs": sum(p.category == category for p in self.invalid)}
                       for category, total in sorted(self.categories.items())}
        return {
            "documents": self.documents, "retried_requests": self.retried, "unscored": len(self.unscored),
            "invalid_outputs": None if self.invalid_flags is None else len(self.invalid),
            "by_category": by_category, "summary": self.summary(),
            "unscored_examples": [p.as_json() for p in self.unscored[:EXAMPLES]],
            "invalid_examples": [p.as_json() for p in self.invalid[:EXAMPLES]],
            "unscored_keys": list(self.unscored_keys), "backend_failure": self.backend_failure,
        }


def combined(parts: Sequence[TaskIntegrity], leaf_categories: Sequence[str] | None = None) -> TaskIntegrity:
    """The integrity of several parts scored apart: a task's blocks (an early stop's), each part's categories summed;
    or a group's leaf tasks (`leaf_categories`: each leaf's category in the group, its task name), each leaf one
    category. Invalid outputs are not combined: a task recounts them over its merged answers, and a group has no
    invalid-output entry of its own."""
    categories: dict[str, int] = {}
    unscored: list[DocumentProblem] = []
    for index, part in enumerate(parts):
        if leaf_categories is None:
            counts, problems = part.categories, part.unscored
        else:
            label = leaf_categories[index]
            counts = {label: part.documents}
            problems = tuple(dataclasses.replace(p, category=label) for p in part.unscored)
        for category, count in counts.items():
            categories[category] = categories.get(category, 0) + count
        unscored += problems
    return TaskIntegrity(sum(p.documents for p in parts), categories, tuple(unscored),
                         tuple(key for part in parts for key in part.unscored_keys), sum(p.retried for p in parts),
                         backend_failure=next((p.backend_failure for p in parts if p.backend_failure), None))


@dataclass(frozen=True)
class IntegrityLimits:
    max_unscored: float = DEFAULT_MAX_UNSCORED
    max_invalid: float = DEFAULT_MAX_INVALID


def limits_for(gate_block: Any, overrides: Mapping[str, float]) -> IntegrityLimits:
    """A task's limits: the command line's (`overrides`, gate/policy.py), else its YAML `modelbench.gate` block's,
    else the defaults."""
    def first(key: str, default: float) -> float:
        for value in (overrides.get(key), getattr(gate_block, key, None)):
            if value is not None:
                return float(value)
        return default

    return IntegrityLimits(first("max_unscored", DEFAULT_MAX_UNSCORED), first("max_invalid", DEFAULT_MAX_INVALID))


def integrity_problems(integrity: TaskIntegrity, limits: IntegrityLimits, *, recording: bool) -> list[str]:
    """Why the task's run is not whole enough to judge (empty: it is). `recording`: the run writes the task's
    baseline."""
    problems = []
    if integrity.backend_failure is not None:
        problems.append(f"{integrity.backend_failure} while scoring the task ({integrity.scored} of "
                        f"{integrity.documents} documents scored)")
    unscored = len(integrity.unscored)
    if recording and unscored:
        problems.append(recording_problem(integrity))
    elif unscored and unscored > limits.max_unscored * integrity.documents:
        problems.append(f"{unscored} of {integrity.documents} documents unscored "
                        f"({_share(unscored, integrity.documents)}, limit {_percent(limits.max_unscored)})")
    if not recording:
        for category, total in sorted(integrity.categories.items()):
            count = sum(p.category == category for p in integrity.unscored)
            if count and count > limits.max_unscored * total and unscored <= limits.max_unscored * integrity.documents:
                problems.append(f"category {category}: {count} of {total} documents unscored "
                                f"({_share(count, total)}, limit {_percent(limits.max_unscored)})")
    invalid = len(integrity.invalid)
    if integrity.invalid_flags is not None and invalid > limits.max_invalid * integrity.scored:
        problems.append(f"{invalid} of {integrity.scored} answers no filter could parse "
                        f"({_share(invalid, integrity.scored)}, limit {_percent(limits.max_invalid)})")
    return problems


def run_problems(evaluation: Any, overrides: Mapping[str, float], *, recording: bool) -> list[str]:
    """Why an evaluated task's run is not whole enough to judge, at its YAML's limits and the command line's
    `overrides` (`integrity_problems`); empty: it is, or the evaluation counts nothing."""
    integrity: TaskIntegrity | None = getattr(evaluation, "integrity", None)
    limits = limits_for(getattr(evaluation.prepared.config, "gate", None), overrides)
    return [] if integrity is None else integrity_problems(integrity, limits, recording=recording)


def recording_problem(integrity: TaskIntegrity) -> str:
    """Why a run that left documents unscored writes no baseline."""
    return (f"{len(integrity.unscored)} of {integrity.documents} documents unscored, and a baseline is recorded only "
            "from a run that scored every document")


def examples(integrity: TaskIntegrity) -> list[str]:
    """A few documents that went wrong, one line each."""
    lines = [f"document {p.doc_id}{_in(p.category)}: unscored: {p.problem}" for p in integrity.unscored[:EXAMPLES]]
    lines += [f"document {p.doc_id}{_in(p.category)}: no filter could parse {p.problem}"
              for p in integrity.invalid[:EXAMPLES]]
    return lines


def why_invalid(regressed: Sequence[Any], counted: Mapping[str, Any] | None) -> str | None:
    """Why the first regressed invalid_output entry (among the `regressed` entries) regressed, in words, from the
    task's integrity as counted (`TaskIntegrity.as_json`, so that a merge says it from a shard's record as the shard
    did), in the entry's own documents: "invalid_output: N of M answers no filter could parse (baseline: x%), e.g.
    document 3: '...'", "invalid_output [category]: ..." for a category's entry. None when no invalid_output entry
    regressed."""
    entry = next((e for e in regressed if e.metric == INVALID_OUTPUT), None)
    if entry is None or counted is None or counted.get("invalid_outputs") is None:
        return None
    counts = counted if entry.category is None else counted["by_category"][entry.category]
    before = "" if entry.baseline is None else f" (baseline: {_percent(entry.baseline)})"
    first = next((p for p in counted.get("invalid_examples", ()) if entry.category in (None, p["category"])), None)
    example = "" if first is None else f", e.g. document {first['doc_id']}: {first['problem']}"
    label = INVALID_OUTPUT if entry.category is None else f"{INVALID_OUTPUT} [{entry.category}]"
    scored = counts["documents"] - counts["unscored"]
    return f"{label}: {counts['invalid_outputs']} of {scored} answers no filter could parse{before}{example}"


def paired_baseline(baseline: BaselineRecord, candidate: BaselineRecord,
                    unscored_keys: Sequence[str]) -> BaselineRecord:
    """The baseline on the documents the candidate scored, when exactly its `unscored_keys` are missing from the
    candidate (both sides of the paired evidence lose the same documents); else the baseline as it is (a candidate
    missing other documents is not comparable: re-baseline required)."""
    if not unscored_keys:
        return baseline
    kept = set(candidate.doc_keys)
    if set(baseline.doc_keys) - kept != set(unscored_keys) or not kept <= set(baseline.doc_keys):
        return baseline
    return restricted(baseline, candidate.doc_keys)


def comparable_candidate(baseline: BaselineRecord, candidate: BaselineRecord) -> BaselineRecord:
    """The candidate without its invalid_output entry when the baseline was recorded before there was one: it is
    compared on the entries both hold, and gains the entry when its baseline is next recorded anew."""
    if INVALID_OUTPUT in baseline.metric_names or INVALID_OUTPUT not in candidate.metric_names:
        return candidate
    return dataclasses.replace(
        candidate, metrics=tuple(m for m in candidate.metrics if m.name != INVALID_OUTPUT),
        overall={k: v for k, v in candidate.overall.items() if k != INVALID_OUTPUT},
        categories={c: {k: v for k, v in block.items() if k != INVALID_OUTPUT}
                    for c, block in candidate.categories.items()},
        values={k: v for k, v in candidate.values.items() if k != INVALID_OUTPUT},
    )


def _in(category: str | None) -> str:
    return "" if category is None else f" ({category})"


def _share(count: int, total: int) -> str:
    return _percent(count / total if total else 0.0)


def _percent(share: float) -> str:
    return f"{100 * share:.1f}%"
