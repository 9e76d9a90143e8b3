"""Ratcheting references: what --snapshot-update writes when a compared baseline is out of band.

Each entry (metric × category) keeps its own reference. An entry that improved is raised to this run's value; an
entry inside its band keeps its anchor (the recording its reference came from), so drift inside the band never
accumulates; an entry that regressed is lowered only when a regression of exactly that entry is accepted by name
(--accept-regression, recorded with when and why); an unaccepted regression blocks the update and nothing is written.
The written record is the candidate's own recording plus the earlier recordings some entry is still anchored to, so
every entry is compared with the per-document values its reference came from (`BaselineRecord.reference_values`).
A re-baseline (not comparable, or an unusable file) keeps no anchor: the record says it was reset, when and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np

from pytest_modelbench.gate.baseline import Acceptance, BaselineRecord, EntryAnchor, Ratchet, Recording
from pytest_modelbench.gate.compare import Entry, TaskComparison
from pytest_modelbench.gate.result import GateResult
from pytest_modelbench.gate.verdict import Verdict

ACCEPT_OPTION = "--accept-regression"
# '<suite>/<task>', or a bundle member's '<suite>/<group>::<member>' (tasks/groups.py)
_ACCEPT_RE = re.compile(
    r"^(?P<task>[^/:\s]+/[^:\s]+(?:::[^:\s]+)*):(?P<metric>[^:\s]+)(?::(?P<category>[^:]+))?$")


class AcceptanceError(ValueError):
    """A malformed --accept-regression value (the pytest layer makes it a usage error)."""


@dataclass(frozen=True)
class AcceptedRegression:
    """One entry whose regression --accept-regression accepts: '<suite>/<task>:<metric>[:<category>]', where a
    bundle member's task is '<group>::<member>'."""

    task: str  # '<suite>/<task>'
    metric: str
    category: str | None  # None: the metric's overall entry

    def __str__(self) -> str:
        return f"{self.task}:{self.metric}" + ("" if self.category is None else f":{self.category}")


def unmatched_acceptances(accepted: Iterable[AcceptedRegression],
                          results: Iterable[GateResult]) -> list[AcceptedRegression]:
    """The acceptances that name no regressed entry of the run's gated tasks: nothing was lowered for them (a
    misspelt name, or a regression that did not happen in this run)."""
    regressed = {(r.task, e["metric"], e["category"]) for r in results for e in r.entries
                 if e["verdict"] == Verdict.REGRESSED.value}
    return [a for a in accepted if (a.task, a.metric, a.category) not in regressed]


def parse_acceptance(text: str) -> AcceptedRegression:
    match = _ACCEPT_RE.match(text.strip())
    if match is None:
        raise AcceptanceError(
            f"{ACCEPT_OPTION}={text!r}: expected '<suite>/<task>:<metric>' (the overall entry) or "
            "'<suite>/<task>:<metric>:<category>', e.g. bias/bbq:accuracy_amb:Age")
    return AcceptedRegression(match["task"], match["metric"], match["category"])


@dataclass(frozen=True)
class RatchetUpdate:
    """What an update of a compared baseline does: the record to write (None: blocked), the regressed entries that
    block it (no acceptance names them), and one line per entry saying what changed."""

    record: BaselineRecord | None
    blocked: tuple[Entry, ...]
    lines: tuple[str, ...]


def stored_ratchet(stored: BaselineRecord) -> Ratchet:
    """The stored record's anchors; a record without any (an older file) is one recording every entry comes from."""
    return stored.ratchet if stored.ratchet is not None else Ratchet(recording="1")


def _in_order(values: dict, keys: tuple[str, ...], order: tuple[str, ...]) -> dict:
    position = {key: i for i, key in enumerate(keys)}
    idx = np.array([position[key] for key in order], dtype=int)
    return {name: column[idx] for name, column in values.items()}


def _signed(value: float) -> str:
    return f"{value:+.4f}"


def ratcheted(stored: BaselineRecord, candidate: BaselineRecord, comparison: TaskComparison,
              accepted: Iterable[AcceptedRegression], *, task: str, when: str, why: str) -> RatchetUpdate:
    """The record --snapshot-update writes for `candidate` against the compared `stored` baseline (see the module
    docstring). `task`: the '<suite>/<task>' key acceptances name; `when`, `why`: recorded with an acceptance."""
    old = stored_ratchet(stored)
    new_id = str(max(int(r) for r in [old.recording, *(e.id for e in old.earlier)]) + 1)
    names = {(a.metric, a.category) for a in accepted if a.task == task}
    blocked = tuple(e for e in comparison.worst_first()
                    if e.verdict is Verdict.REGRESSED and (e.metric, e.category) not in names)
    blocked_keys = {(e.metric, e.category) for e in blocked}
    anchors, lines = [], []
    for entry in comparison.entries:
        previous = old.anchor(entry.metric, entry.category)
        origin = previous.origin if previous is not None else entry.baseline
        since = previous.origin_created if previous is not None else stored.provenance.created
        where = f"{entry.metric} [{entry.label}]"
        if entry.verdict is Verdict.IMPROVED or (entry.verdict is Verdict.REGRESSED
                                                  and (entry.metric, entry.category) not in blocked_keys):
            acceptance = None
            if entry.verdict is Verdict.REGRESSED:
                acceptance = Acceptance(when, why, entry.baseline, entry.candidate)
            anchors.append(EntryAnchor(entry.metric, entry.category, new_id, origin, since, acceptance))
            verb = "raised" if acceptance is None else f"lowered (regression accepted: {why})"
            lines.append(f"{where}: {verb} {entry.baseline:.4f} → {entry.candidate:.4f} (accepts "
                         f"{_signed(entry.delta)}); {_signed(entry.candidate - origin)} since its origin {origin:.4f} "
                         f"({since})")
            continue
        recording = previous.recording if previous is not None else old.recording
        anchors.append(EntryAnchor(entry.metric, entry.category, recording, origin, since,
                                   previous.accepted if previous is not None else None))
        lines.append(f"{where}: kept at {entry.baseline:.4f} (accepts no change; this run {_signed(entry.delta)} "
                     f"against its anchor, {entry.verdict.value}); {_signed(entry.baseline - origin)} since its "
                     f"origin {origin:.4f} ({since})")
    if blocked:
        return RatchetUpdate(None, blocked, tuple(lines))
    referenced = {a.recording for a in anchors} - {new_id}
    stored_own = Recording(old.recording, stored.provenance.model, stored.provenance.created, stored.values)
    earlier = tuple(
        replace(r, values=_in_order(dict(r.values), stored.doc_keys, candidate.doc_keys))
        for r in (stored_own, *old.earlier) if r.id in referenced
    )
    ratchet = Ratchet(recording=new_id, earlier=earlier, entries=tuple(anchors), reset=old.reset)
    return RatchetUpdate(replace(candidate, ratchet=ratchet), (), tuple(lines))


def reset_record(candidate: BaselineRecord, *, when: str, why: str) -> BaselineRecord:
    """A re-baseline's record: no anchor carries over; the record says when and why its anchors were reset."""
    return replace(candidate, ratchet=Ratchet(recording="1", reset=(when, why)))
