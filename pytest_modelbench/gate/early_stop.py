"""Early stopping: score a task's documents in a seeded random order, in blocks, and stop once its verdict is settled.

Order and looks. The documents are scored in a random order seeded by the task's key (the same on every machine and
run), in BLOCKS equal blocks of at least MIN_BLOCK documents; after each block but the last the gate looks at what
was scored. A task with fewer than 2 × MIN_BLOCK documents is scored in full. Every bound below is valid at every
document of that order at once, so looking after each block costs no error control.

What settles a task at a look (`settle`), given the gate's own entries on the documents scored so far:
  regressed  An entry's always-valid p-value of "not worse than −margin", Holm-adjusted over the task's entries
             with the gate's weights, is under the task's level, so a candidate no worse than its margin is blocked
             with probability at most the task's level, as in the full run. For an entry of a 0/1 metric (McNemar's)
             the p-value comes from a bet (evidence/anytime.py, "Betting"), exact and without a variance estimate; for any other
             entry from the normal mixture (evidence/anytime.py), asymptotic. Either is floored by the entry's fixed-sample
             p-value, which only makes it more conservative.
  not        No entry can regress in the full run. Only an entry of a 0/1 metric (a mean over documents with a higher
  regressed  or lower direction: what `compare` tests with McNemar) can show that before it is scored in full: its
             per-document paired differences lie in {−1, 0, 1}, and the full run's delta is their mean over the
             entry's N documents, of which the scored ones are a sample without replacement in scoring order. The
             full run can block the entry only below −`least_churn_regression` at the entry's first step of the
             task's weighted Holm (no entry is rejected unless one is below its first step), whatever the unscored
             documents' spread; the stop needs a lower confidence bound for that mean (`population_mean_bound`, at
             DISAGREEMENT, valid at every look at once) above it. A task stops only if every entry excludes its
             region, so however many entries could block, the chance of passing early a task the full run blocks is
             at most DISAGREEMENT (the stop needs the bound of each blocking entry to miss, and each misses at most
             that often). An entry with unscored documents and no known bound per document (continuous values,
             ideal-point and derived metrics, a metric with its own aggregate) never lets the task stop so: the task
             is scored on. A block in which no document changed bounds the unscored documents only as far as
             sampling without replacement does: of 800 documents at α = 0.05, 278 unchanged ones must be scored
             before no drop the full run blocks (15 or more lost, none gained) can hide in the rest at 1% (210 at
             the least for any rule valid at 1%: the chance that 210 drawn documents miss all 15 lost ones).
             Each entry reports the full run's verdict where that is the same at both corners of its bounds (the
             delta's lower and upper, and the share of changed documents', the last three at DISAGREEMENT / 3 each:
             `full_run_verdict`), else its verdict on the documents scored (inconclusive where that said regressed);
             with `full_run_verdicts` (--early-stop-verdicts) it stops only where every entry's full-run verdict is
             known, so the verdicts it reports, not only the release decision, are the full run's (an entry's only
             where one of its four bounds misses: at most 2 × DISAGREEMENT for each entry).
             Under EarlyStop's "task" (xdist workers, shards) a task of a suite with pooled entries keeps its
             documents for them: its pooled metrics' overall entries must also lie above minus the pooled margin
             (half its own), so a task that could add to a drop spread over the suite is scored in full.
             Such a stop can only pass, never block: it does not touch the false-block rate.
Otherwise the next block is scored; after the last block the task is judged as without early stopping. A suite's
pooled entries stop as early_stop_pooled.py says.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pytest_modelbench.gate.baseline import BaselineRecord, rebaseline_problem
from pytest_modelbench.gate.compare import Entry, TaskComparison, compare, entry_groups, holm_weights
from pytest_modelbench.gate.evidence.anytime import anytime_p_worse, betting_p_worse, population_mean_bound
from pytest_modelbench.gate.evidence.paired import paired_standard_error_of_shares
from pytest_modelbench.gate.evidence.pooling import PoolingStats
from pytest_modelbench.gate.evidence.significance import (holm_adjust, least_churn_regression, mcnemar_one_sided_pvalue,
                                                          upper_quantile, worse_than_margin_pvalue)
from pytest_modelbench.gate.pooled import MARGIN_SHARE as POOLED_MARGIN_SHARE
from pytest_modelbench.gate.verdict import Verdict, judge_entry

BLOCKS = 8
MIN_BLOCK = 100
MIN_ENTRY_DOCUMENTS = 10
PRIOR_DOCUMENTS = 10  # of the metric's overall per-document spread in each entry's standard error at a look
DISAGREEMENT = 0.01  # how often a "not regressed" stop may pass a task the full run blocks, over all looks


def scoring_order(n: int, task_key: str) -> np.ndarray:
    """The documents' positions in the order they are scored: a permutation seeded by the task's key."""
    rng = np.random.Generator(np.random.PCG64(zlib.crc32(task_key.encode("utf-8"))))
    return rng.permutation(n)


def scoring_blocks(n: int, task_key: str) -> list[np.ndarray]:
    """The positions of each block, in scoring order: one block (everything) below 2 × MIN_BLOCK documents."""
    count = max(1, min(BLOCKS, n // MIN_BLOCK))
    ends = [round(n * (k + 1) / count) for k in range(count)]
    order = scoring_order(n, task_key)
    return [order[start:end] for start, end in zip([0] + ends[:-1], ends)]


@dataclass(frozen=True)
class Differences:
    """An entry of a 0/1 metric on the documents scored so far: their oriented paired differences (each −1, 0 or 1)
    in scoring order; the entry's documents in the whole task; the full run's margin (at the whole category's
    baseline value)."""

    values: np.ndarray
    total: int
    margin: float


def bounded_differences(baseline: BaselineRecord, candidate: BaselineRecord, task_key: str,
                        aggregates: Mapping[str, Any] | None = None) -> dict[tuple[str, str | None], Differences]:
    """Each entry's `Differences` for the 0/1 metrics with a higher or lower direction whose entry is a mean over
    documents (what `compare` tests with McNemar): the only entries whose per-document values have a known range.
    `candidate`: its record of the documents scored so far (each one of the baseline's), in any order."""
    position = {key: i for i, key in enumerate(baseline.doc_keys)}
    rank = np.empty(len(position), dtype=int)
    rank[scoring_order(len(position), task_key)] = np.arange(len(position))
    rows = np.array([position[key] for key in candidate.doc_keys], dtype=int)
    in_order = np.argsort(rank[rows], kind="stable")
    scored = rows[in_order]
    evidence = {}
    for metric in candidate.metrics:
        if not metric.binary or metric.aggregate or metric.name in (aggregates or ()) \
                or metric.direction not in ("higher", "lower"):
            continue
        sign = 1.0 if metric.direction == "higher" else -1.0
        for category, members in entry_groups(baseline):
            # the entry's anchor recording's values (gate/ratchet.py): the baseline's own unless it kept an earlier one
            base = np.asarray(baseline.reference_values(metric.name, category)[metric.name], dtype=float)
            differences = sign * (np.asarray(candidate.values[metric.name], dtype=float)[in_order] - base[scored])
            members = members & ~np.isnan(base)
            own = members[scored] & ~np.isnan(differences)
            margin = candidate.tolerance.margin(metric.name).at(float(base[members].mean())) if members.any() else 0.0
            evidence[(metric.name, category)] = Differences(differences[own], int(members.sum()), margin)
    return evidence


@dataclass(frozen=True)
class Settlement:
    """A task settled at a look: its entries with their settled verdicts, on the documents scored so far."""

    comparison: TaskComparison
    scored: int
    total: int

    @property
    def verdict(self) -> Verdict:
        return self.comparison.verdict

    @property
    def note(self) -> str:
        how = "regressed" if self.verdict is Verdict.REGRESSED else "cannot regress"
        return f"stopped early ({how}) after {self.scored:,} of {self.total:,} documents"


def entry_totals(baseline: BaselineRecord) -> dict[str | None, int]:
    """Documents per entry category in the whole task (None: overall)."""
    categories = ["" if c is None else c for c in baseline.doc_categories]
    totals: dict[str | None, int] = {None: len(categories)}
    for category in categories:
        totals[category] = totals.get(category, 0) + 1
    for category, members in baseline.category_members.items():
        totals[category] = sum(totals.get(m, 0) for m in members)
    return totals


def restricted(baseline: BaselineRecord, keys: Sequence[str]) -> BaselineRecord:
    """The baseline's documents with these keys (what a stopped run scored), for a paired comparison on them.
    Its stored summaries are the whole task's: only the per-document values are read by the comparison."""
    position = {key: i for i, key in enumerate(baseline.doc_keys)}
    idx = np.array([position[key] for key in keys], dtype=int)
    return dataclasses.replace(
        baseline, doc_keys=tuple(baseline.doc_keys[i] for i in idx), doc_ids=tuple(baseline.doc_ids[i] for i in idx),
        doc_categories=tuple(baseline.doc_categories[i] for i in idx),
        values={name: values[idx] for name, values in baseline.values.items()},
        ratchet=None if baseline.ratchet is None else dataclasses.replace(baseline.ratchet, earlier=tuple(
            dataclasses.replace(r, values={name: v[idx] for name, v in r.values.items()})
            for r in baseline.ratchet.earlier)),
    )


def settle(comparison: TaskComparison, totals: Mapping[str | None, int],
           evidence: Mapping[tuple[str, str | None], Differences], pooled: bool = False,
           full_run_verdicts: bool = False) -> Settlement | None:
    """The task's settlement at a look, or None to score on. `comparison`: the gate's on the documents scored so far;
    `totals`: each entry category's documents in the whole task; `evidence`: the entries of 0/1 metrics
    (`bounded_differences`); `pooled`: the task's suite has pooled entries, whose documents it must keep unless it
    cannot add to a drop they could see; `full_run_verdicts`: settle not regressed only where every entry's full-run
    verdict is known."""
    entries = comparison.entries
    if not entries:
        return None
    alpha = comparison.tolerance.task_alpha
    weights = holm_weights([(e.metric, e.category) for e in entries])
    total = totals[None]
    errors = steadied_standard_errors(entries)
    anytime = [_anytime_p(e, se, evidence.get((e.metric, e.category)), totals.get(e.category, e.n),
                          alpha * w / sum(weights))
               for e, se, w in zip(entries, errors, weights)]
    adjusted = holm_adjust(anytime, weights)
    if any(p < alpha for p in adjusted):
        settled = [
            dataclasses.replace(e, verdict=Verdict.REGRESSED, p_value=p) if p < alpha
            else dataclasses.replace(e, verdict=Verdict.INCONCLUSIVE) if e.verdict is Verdict.REGRESSED else e
            for e, p in zip(entries, adjusted)
        ]
        return Settlement(dataclasses.replace(comparison, entries=tuple(settled)), comparison.n_documents, total)
    pooling = {p.metric for p in comparison.pooling} if pooled else set()
    settled = []
    for entry, weight in zip(entries, weights):
        floor = -POOLED_MARGIN_SHARE * entry.margin if entry.category is None and entry.metric in pooling else None
        # Holm rejects nothing unless some entry's p-value is below its first-step level: no entry can regress
        # while none can reach it.
        first_step = alpha * weight / sum(weights)
        outlook = _full_run_outlook(entry, evidence.get((entry.metric, entry.category)),
                                    totals.get(entry.category, entry.n), alpha, first_step, floor, full_run_verdicts)
        if outlook is None:
            return None
        settled.append(dataclasses.replace(entry, verdict=outlook))
    return Settlement(dataclasses.replace(comparison, entries=tuple(settled)), comparison.n_documents, total)


def _anytime_p(entry: Entry, se: float, differences: Differences | None, total: int, level: float) -> float:
    """The entry's always-valid p-value of "not worse than −margin", never below its fixed-sample one: by betting on
    its `differences` where its values are 0/1 (exact), else by the normal mixture (asymptotic: only from
    MIN_ENTRY_DOCUMENTS documents, or all of its category)."""
    if entry.test == "none":
        return 1.0
    if entry.test == "mcnemar" and differences is not None:
        return max(entry.raw_p_value, betting_p_worse(differences.values, entry.margin))
    if entry.n < MIN_ENTRY_DOCUMENTS and entry.n < total:
        return 1.0
    return max(entry.raw_p_value, anytime_p_worse(entry.delta, se, entry.margin, entry.n, total, level))


def steadied_standard_errors(entries: Sequence[Entry]) -> list[float]:
    """Each entry's standard error for the normal mixture: never below what a prior of PRIOR_DOCUMENTS documents at
    its metric's overall per-document spread gives it. A few scored documents of a small category may all agree
    (standard error 0) while the category's unscored ones do not; the prior keeps such an entry from blocking on
    them alone."""
    spread = {e.metric: e.standard_error * math.sqrt(e.n) for e in entries if e.category is None}
    errors = []
    for e in entries:
        own = e.standard_error * math.sqrt(e.n)
        prior = spread.get(e.metric, own)
        steadied = math.sqrt((e.n * own * own + PRIOR_DOCUMENTS * prior * prior) / (e.n + PRIOR_DOCUMENTS) / max(e.n, 1))
        errors.append(max(e.standard_error, steadied))
    return errors


def _full_run_outlook(entry: Entry, differences: Differences | None, total: int, alpha: float, first_step: float,
                      floor: float | None, full_run_verdicts: bool = False) -> Verdict | None:
    """None when the full run might still find this entry regressed (or, with a `floor`, its full-run delta below
    it; with `full_run_verdicts`, when its full-run verdict is not known); else the verdict to report for it: the
    full run's when the documents scored so far settle it, else the verdict on them (never regressed).

    An entry scored in full has its full-run verdict. Otherwise only an entry of 0/1 values (`differences`) can
    settle: the full run's delta is the mean of the task's `total` differences, each in [−1, 1], of which the scored
    ones are a sample without replacement in scoring order, and `population_mean_bound` bounds it at every look at
    once. The full run can regress the entry only below −`least_churn_regression` at its `first_step` level, whatever
    the unscored documents' spread; the lower bound, at DISAGREEMENT, must lie above that (and above the `floor`).
    Its verdict otherwise is known where it is the same at both corners of the bounds on its delta and on its share
    of changed documents (`full_run_verdict`)."""
    if entry.n >= total:
        return None if entry.verdict is Verdict.REGRESSED else entry.verdict
    if entry.test != "mcnemar" or differences is None:
        return None
    scored = differences.values
    low = population_mean_bound(scored, total, DISAGREEMENT, -1.0, 1.0)
    may_regress = -least_churn_regression(differences.margin, upper_quantile(first_step), total)
    if low < max(may_regress, floor if floor is not None else may_regress):
        return None
    share = DISAGREEMENT / 3  # of each of the other three bounds, which only the verdict's label rests on
    high = population_mean_bound(scored, total, share, -1.0, 1.0, upper=True)
    changed = np.abs(scored)
    changed_low = population_mean_bound(changed, total, share, 0.0, 1.0)
    changed_high = population_mean_bound(changed, total, share, 0.0, 1.0, upper=True)
    worst = full_run_verdict(low, max(changed_high, abs(low)), total, differences.margin, alpha, first_step)
    best = full_run_verdict(high, max(changed_low, abs(high)), total, differences.margin, alpha)
    if worst is best:
        return worst
    if full_run_verdicts:
        return None
    return Verdict.INCONCLUSIVE if entry.verdict is Verdict.REGRESSED else entry.verdict


def full_run_verdict(delta: float, changed: float, total: int, margin: float, alpha: float,
                     improved_level: float | None = None) -> Verdict:
    """The verdict `compare` and `verdict.judge_entry` give a mean of `total` 0/1 values per document that does not
    regress, with paired differences of mean `delta` of which a share `changed` is not 0: pass, inconclusive or
    improved. It only gets better as delta grows or the share falls (a smaller standard error, McNemar's tail of
    more gains among fewer changes), so over a box of the two its extremes are at two corners. `improved_level`:
    the level p_better must be under for improved (default alpha). The full run Holm-adjusts p_better over the
    task's entries, so an entry is surely improved only below its first Holm step and possibly improved below alpha."""
    standard_error = paired_standard_error_of_shares(delta, changed, total)
    gained, lost = round(total * (changed + delta) / 2), round(total * (changed - delta) / 2)
    p_better = max(worse_than_margin_pvalue(-delta, standard_error, margin),
                   mcnemar_one_sided_pvalue(max(gained, 0), max(lost, 0)))
    if p_better >= (alpha if improved_level is None else improved_level):
        p_better = 1.0
    return judge_entry(delta, p_worse=1.0, p_better=p_better, standard_error=standard_error, margin=margin,
                       alpha=alpha, mde=0.0).verdict


def look(baseline: BaselineRecord, candidate: BaselineRecord, task_key: str, pooled: bool = False,
         documents: Sequence[Any] | None = None, aggregates: Mapping[str, Any] | None = None,
         full_run_verdicts: bool = False) -> Settlement | None:
    """One look: the candidate's record of the documents scored so far (each of them one of the baseline's, the
    run comparable with it, scored in `task_key`'s order) compared with the baseline on those documents, at the
    candidate's tolerance, and settled (`settle`). `documents` and `aggregates`: what `compare` needs for metrics
    with their own aggregate."""
    return settle(compared_so_far(baseline, candidate, documents, aggregates), entry_totals(baseline),
                  bounded_differences(baseline, candidate, task_key, aggregates), pooled, full_run_verdicts)


def compared_so_far(baseline: BaselineRecord, candidate: BaselineRecord, documents: Sequence[Any] | None = None,
                    aggregates: Mapping[str, Any] | None = None, failed: int = 0) -> TaskComparison:
    """The gate's comparison on the documents scored so far (the candidate's), with its pooling statistics saying
    how many of the task's documents are not yet scored. `failed`: the documents the backend could not score
    (gate/integrity.py), left out of both sides as in a run without --early-stop, not waiting to be scored."""
    comparison = compare(restricted(baseline, candidate.doc_keys), candidate, candidate.tolerance, documents,
                         aggregates)
    unscored = len(baseline.doc_keys) - comparison.n_documents - failed
    return dataclasses.replace(comparison, pooling=tuple(dataclasses.replace(p, unscored=unscored)
                                                         for p in comparison.pooling))


class EarlyStop:
    """One task's early stopping against its stored baseline: the blocks to score, and after each the look.

    `candidate_record` builds the candidate's record from an evaluation of the documents scored so far (the gate's
    own, judge.py). A look that finds the run not comparable with the baseline (other settings, other documents)
    settles nothing: the task is scored in full and the gate then reports why. `pooled`: how a task of a suite with
    pooled entries keeps documents for them: "task" (its own look must see it cannot add to a drop spread over the
    suite), "suite" (it stops on its own verdict; its suite's pooled entries look at its first blocks later,
    `pooling_at`, scoring on where it stopped before them: the run's tasks must all be in one process), None (no
    pooled entries). `full_run_verdicts` (--early-stop-verdicts): stop not regressed only where every verdict the
    task reports is the full run's (`settle`). `integrity_problems`: why an evaluation's run is not whole enough to
    judge (judge.py), for what the task scored past its stop (`scored_on`)."""

    def __init__(self, task_key: str, baseline: BaselineRecord, candidate_record: Callable[[Any], BaselineRecord],
                 integrity_problems: Callable[[Any], list[str]], pooled: str | None = None,
                 full_run_verdicts: bool = False):
        self.task_key = task_key
        self.integrity_problems = integrity_problems
        self.scored_on: Any = None  # the evaluation of every document scored, once scored on past the task's stop
        self.pooled = pooled
        self.full_run_verdicts = full_run_verdicts
        self.baseline = baseline
        self.candidate_record = candidate_record
        self.settlement: Settlement | None = None
        self._looks = 0
        self._comparable = True
        self._scoring: Any = None
        self._pooling: dict[int, tuple[PoolingStats, ...]] = {}  # by blocks scored: the pooling statistics on them

    def blocks(self, n: int) -> list[np.ndarray]:
        blocks = scoring_blocks(n, self.task_key)
        self._looks = len(blocks) - 1
        return blocks

    @property
    def block_count(self) -> int:
        return self._looks + 1

    def run(self, scoring: Any) -> Any:
        """The task's evaluation, scored by `scoring` (evaluation.BlockScoring over `blocks`) up to the block that
        settles it."""
        self._scoring = scoring
        while True:
            evaluation = scoring.score_next()
            if self.settled(evaluation) or not scoring.blocks_left:
                return evaluation

    def pooling_at(self, blocks: int) -> tuple[PoolingStats, ...] | None:
        """The task's pooling statistics on its first `blocks` blocks, for its suite's pooled entries; a task that
        stopped before them (unable to regress) scores its next blocks, its own verdict staying its settlement's.
        None where there are none: a task not compared, or stopped regressed."""
        while (blocks not in self._pooling and self._comparable and self.settlement is not None
               and self.settlement.verdict is not Verdict.REGRESSED and self._scoring.blocks_left):
            evaluation = self._scoring.score_next()
            self.scored_on = evaluation
            self._pooling[self._blocks_done] = self._compared(evaluation, self.candidate_record(evaluation)).pooling
        return self._pooling.get(blocks)

    @property
    def _blocks_done(self) -> int:
        return len(self._scoring.blocks) - self._scoring.blocks_left

    def settled(self, evaluation: Any) -> bool:
        if not self._comparable:
            return False
        candidate = self.candidate_record(evaluation)
        known = set(self.baseline.doc_keys)
        if not all(key in known for key in candidate.doc_keys):
            self._comparable = False
            return False
        if rebaseline_problem(restricted(self.baseline, candidate.doc_keys), candidate) is not None:
            self._comparable = False
            return False
        comparison = self._compared(evaluation, candidate)
        self._pooling[self._blocks_done] = comparison.pooling
        # the last block settles nothing (the task is judged in full), its statistics kept for the last pooled look
        self.settlement = settle(comparison, entry_totals(self.baseline),
                                 bounded_differences(self.baseline, candidate, self.task_key,
                                                     evaluation.scores.aggregates()),
                                 self.pooled == "task", self.full_run_verdicts) if self._scoring.blocks_left else None
        return self.settlement is not None

    def _compared(self, evaluation: Any, candidate: BaselineRecord) -> TaskComparison:
        return compared_so_far(self.baseline, candidate, evaluation.prepared.documents,
                               evaluation.scores.aggregates(), len(evaluation.integrity.unscored))

