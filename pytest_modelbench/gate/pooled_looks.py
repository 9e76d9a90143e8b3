"""--early-stop in one process, at the session's end: the pooled looks of each suite whose tasks stopped early.

A suite's pooled entries look at the same first share of every task (`pooled_look_blocks`), one more block's share a
look, the tasks that stopped before it scoring on (`EarlyStop.pooling_at`), until early_stop_pooled.settle_pooled
settles them (gate/early_stop_pooled.py). The pytest layer (GateSession) and any caller holding a
session's decision and its early stops call the same `settle_pooled_looks`.
"""

from __future__ import annotations

import math
from typing import Mapping

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.gate.decision import SessionDecision
from pytest_modelbench.gate.early_stop import BLOCKS, EarlyStop


def settle_pooled_looks(decision: SessionDecision, early_stops: Mapping[str, EarlyStop]) -> None:
    """Look at the pooled entries of every suite of `decision` whose tasks stopped early, replacing each task's
    pooling statistics in it with those of the look that settles them. `early_stops`: the early stopping of each task
    of a suite with pooled entries (EarlyStop's "suite"), by its '<suite>/<task>' key. A task that cannot score on
    fails the session (SessionDecision.pooled_problems)."""
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
        except ModelbenchError as exc:
            decision.pooled_problems.append(f"{key}: could not score on for the pooled entries of {suite}: {exc}")
            return
        if suite not in decision.unsettled_pooled():
            return
