"""Early stopping of a suite's pooled entries (gate/pooled.py) where --early-stop left documents of their tasks unscored.

Under EarlyStop's "suite" (every task in one process) a task stops on its own verdict. Where that
leaves a suite's pooled entries (gate/pooled.py) open, the session looks at them on the same first share of every
task's blocks (`pooled_look_blocks`: look k sees k/BLOCKS of each), scoring on the tasks that stopped before it
(`EarlyStop.pooling_at`), one more share a look until `settle_pooled` settles them. The share is fixed in advance,
not each task's own stop: a task stops where its documents look good, so pooling every task at its own stop would
lean to the better side. `pooled_outlook` then settles an entry as the normal approximation says, for the pooled
delta estimated task by task (each task's share a sample without replacement of its own): unlike a task's own stop
it still rests on the scored documents' spread (steadied by a prior), since the pooled statistics carry sums, not
the documents in scoring order; each task's variance is floored at the least a blocked pooled drop of 0/1 values
has (edge − edge², `least_churn_regression`), so documents that all agree do not settle it. An entry left
unsettled (one of its tasks stopped regressed) reports its verdict on the documents seen, regressed only where a
task is.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Callable, Collection, Mapping, Sequence

import numpy as np

from pytest_modelbench.gate.early_stop import BLOCKS, DISAGREEMENT, PRIOR_DOCUMENTS
from pytest_modelbench.gate.evidence.pooling import PoolingStats
from pytest_modelbench.gate.evidence.significance import least_churn_regression, upper_quantile
from pytest_modelbench.gate.pooled import MARGIN_SHARE, PooledEntry
from pytest_modelbench.gate.verdict import Verdict


def _outlook(low: float, high: float, may_regress: float, margin: float, z_se: float,
             on_scored: Verdict, full_run_verdicts: bool = False) -> Verdict | None:
    """The verdict of a pooled entry whose full-run delta lies in [`low`, `high`]: None where that reaches below
    `may_regress`; else the full run's verdict where the interval lies in one of its regions (verdict.judge_entry:
    up to −margin + `z_se` inconclusive, up to margin + `z_se` pass, above improved), else (None with
    `full_run_verdicts`) `on_scored`, the verdict on the documents scored, never regressed."""
    if low < may_regress:
        return None
    bounds = (-margin + z_se, margin + z_se)
    region_of: Callable[[float], int] = lambda x: sum(x >= b for b in bounds)
    if region_of(low) == region_of(high):
        return (Verdict.INCONCLUSIVE, Verdict.PASS, Verdict.IMPROVED)[region_of(low)]
    if full_run_verdicts:
        return None
    return Verdict.INCONCLUSIVE if on_scored is Verdict.REGRESSED else on_scored


def pooled_outlook(members: Sequence[PoolingStats], level: float, first_step: float,
                   on_scored: Verdict, full_run_verdicts: bool = False) -> Verdict | None:
    """A pooled entry's verdict when some of its tasks left documents unscored: None while the full run might still
    find it regressed (with `full_run_verdicts`, while its full-run verdict is not known), else the full run's
    verdict where the documents scored settle it, else `on_scored` (its verdict on them, never regressed).
    `members`: each pooled task's statistics of the entry's metric; `level`: the pooled family's; `first_step`: the entry's first-step level of the family's Holm (no pooled entry regresses
    unless one is below it).

    The full run's pooled delta is the tasks' full-run deltas weighted by their documents; each is estimated from the
    task's scored documents (a sample without replacement of its own, so stratified by task), its variance steadied
    by PRIOR_DOCUMENTS documents at the pooled spread and never below the least a drop the full run blocks has
    (`least_churn_regression` at the pooled margin: a look at documents that all agree cannot settle on them alone).
    The interval's level, DISAGREEMENT over at most BLOCKS looks,
    bounds how often the full run would have blocked an entry settled here. The region the full run blocks is taken
    without McNemar's floor, which only narrows it."""
    scored = np.array([s.n for s in members], dtype=float)
    totals = scored + np.array([s.unscored for s in members], dtype=float)
    sums = np.array([s.delta_sum for s in members])
    squares = np.array([s.delta_square_sum for s in members])
    means = sums / scored
    own = np.where(scored > 1, (squares - scored * means ** 2) / np.maximum(scored - 1, 1), 0.0)
    everything = scored.sum()
    spread = max(0.0, (squares.sum() - sums.sum() ** 2 / everything) / max(everything - 1, 1))
    weights = totals / totals.sum()
    margin = MARGIN_SHARE * float(weights @ np.array([s.margin for s in members]))
    # Documents that all agree have no spread; a pooled drop the full run blocks has at least edge − edge² per
    # document (its differences are 0/1 ones: least_churn_regression).
    edge = least_churn_regression(margin, upper_quantile(first_step), int(totals.sum()))
    variances = np.maximum((scored * np.maximum(own, 0.0) + PRIOR_DOCUMENTS * spread) / (scored + PRIOR_DOCUMENTS),
                           edge - edge * edge)
    delta = float(weights @ means)
    unknown = float(np.sum(weights ** 2 * variances / scored * (totals - scored) / np.maximum(totals - 1, 1)))
    full_se = math.sqrt(max(0.0, float(weights @ (variances + means ** 2)) - delta ** 2) / totals.sum())
    half_width = upper_quantile(DISAGREEMENT / BLOCKS) * math.sqrt(unknown)
    return _outlook(delta - half_width, delta + half_width, -margin - upper_quantile(first_step) * full_se,
                    margin, upper_quantile(level) * full_se, on_scored, full_run_verdicts)


def settle_pooled(entries: Sequence[PooledEntry], stats_by_task: Mapping[str, Sequence[PoolingStats]],
                  regressed_tasks: Collection[str] = (),
                  full_run_verdicts: bool = False) -> tuple[list[PooledEntry], list[str]]:
    """(the pooled entries, each with unscored documents given the verdict `pooled_outlook` settles it at, or while
    unsettled its verdict on the documents scored; the metrics of those unsettled). An early stop can miss a
    regression, never add a block: an unsettled entry reports regressed only when one of its tasks is in
    `regressed_tasks` (the session fails on that task anyway). A look at a larger share of the tasks
    (EarlyStop.pooling_at) is what settles the others. `full_run_verdicts`: as for `pooled_outlook`."""
    settled, unsettled = [], []
    family = Counter(entry.suite for entry in entries)  # a suite's pooled entries share its level by Holm
    for entry in entries:
        if not entry.unscored:
            settled.append(entry)
            continue
        members = [s for task in entry.tasks for s in stats_by_task[task] if s.metric == entry.metric]
        verdict = pooled_outlook(members, entry.level, entry.level / family[entry.suite], entry.verdict,
                                 full_run_verdicts)
        if verdict is None:
            unsettled.append(entry.metric)
            blocked_anyway = any(task in regressed_tasks for task in entry.tasks)
            verdict = Verdict.INCONCLUSIVE if entry.verdict is Verdict.REGRESSED and not blocked_anyway \
                else entry.verdict
        settled.append(dataclasses.replace(entry, verdict=verdict))
    return settled, unsettled
