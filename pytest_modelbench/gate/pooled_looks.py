"""--early-stop in one process, at the session's end: the pooled looks of each suite whose tasks stopped early.

A suite's pooled entries look at the same first share of every task (`pooled_look_blocks`), one more block's share a
look, the tasks that stopped before it scoring on (`EarlyStop.pooling_at`), until early_stop_pooled.settle_pooled
settles them (gate/early_stop_pooled.py). What a task scores past its stop is checked as the run without
--early-stop checks all of its documents (gate/integrity.py): the documents the backend failed on are left out of both
sides of the pooled entries and counted in the task's integrity, and over its limits the task is in `error`.
The pytest layer (GateSession) and any caller holding a session's decision and its early stops call the same
`settle_pooled_looks`.
"""

from __future__ import annotations

import math
from typing import Mapping

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.decision import SessionDecision
from pytest_modelbench.gate.early_stop import BLOCKS, EarlyStop
from pytest_modelbench.gate.result import STATUS_COMPARED, GateResult


def settle_pooled_looks(decision: SessionDecision, early_stops: Mapping[str, EarlyStop]) -> None:
    """Look at the pooled entries of every suite of `decision` whose tasks stopped early, replacing each task's
    pooling statistics in it with those of the look that settles them. `early_stops`: the early stopping of each task
    of a suite with pooled entries (EarlyStop's "suite"), by its '<suite>/<task>' key. A task that cannot score on
    fails the session (SessionDecision.pooled_problems); one whose scoring on leaves it over its integrity limits
    is in `error` in it."""
    for suite in sorted(decision.pooled_weights):
        stops = {key: stop for key, stop in sorted(early_stops.items()) if key.split("/", 1)[0] == suite}
        if any(stop.settlement is not None for stop in stops.values()):  # else every task was scored in full
            _look_until_settled(decision, suite, stops)


def pooled_look_blocks(look: int, block_count: int) -> int:
    """The blocks of a task of `block_count` that a suite's pooled look number `look` (1 to BLOCKS) sees: the same
    share of every task, fixed in advance, so no task's own stop decides what the pooled entry sees."""
    return math.ceil(look * block_count / BLOCKS)


def _look_until_settled(decision: SessionDecision, suite: str, stops: Mapping[str, EarlyStop]) -> None:
    for look in range(1, BLOCKS + 1):
        try:
            for key, stop in stops.items():
                stats = stop.pooling_at(pooled_look_blocks(look, stop.block_count))
                if stats is not None:
                    decision.replace_pooling(key, stats)
                _recount_integrity(decision, key, stop)
        except ModelbenchError as exc:
            decision.pooled_problems.append(f"{key}: could not score on for the pooled entries of {suite}: {exc}")
            return
        if suite not in decision.unsettled_pooled():
            return


def _recount_integrity(decision: SessionDecision, task: str, stop: EarlyStop) -> None:
    """The compared task's integrity in `decision`: that of every document it scored, at its own stop and for the
    pooled looks (`EarlyStop.scored_on`); over its limits, its result is in `error` (its pooled statistics left out
    with it), as its judgement puts a run over them."""
    if stop.scored_on is None:
        return  # nothing scored past the stop its judgement counted
    integrity = stop.scored_on.integrity
    problems = stop.integrity_problems(stop.scored_on)
    for index, result in enumerate(decision.results):
        if result.task != task or result.status != STATUS_COMPARED:
            continue
        if problems:
            decision.results[index] = GateResult.over_integrity_limits(
                problems, integrity.scored, task=task, baseline=result.baseline, baseline_name=result.baseline_name,
                integrity=integrity.as_json(), nodeid=result.nodeid, failed=True)
        else:
            result.integrity = integrity.as_json()
