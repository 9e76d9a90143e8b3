"""Early stopping (--early-stop) on simulated release candidates: documents scored, and agreement with the full run.

    python benchmarks/early_stopping.py [--candidates 400] [--seed 11] [--rows N ...] [--json-out PATH]

Every candidate is judged twice through the gate's own code, on the shipped suites' shapes of
benchmarks/gate_error_rates.py (its baselines, candidates and split of alpha): once on all documents (`compare`, as
without --early-stop), once as --early-stop runs it (gate/early_stop.py: the task's seeded order, its blocks, `settle`
after each block but the last; then, as the session does in one process, the pooled looks of each suite with a task
stopped early, on the same first share of every task, until `settle_pooled` settles them). A document's score does
not depend on which others are scored with it, so replaying the looks on the candidate's full values is what the run
would do. Printed per row: the share of the rows' documents scored; how often the release decision (blocked or not)
was the full run's; how often the same task items were blocked; how often the same suites' pooled entries were; the
share of tasks whose verdict (pass, inconclusive, improved, regressed) was the full run's; the share of candidates
the full run blocked; and the share in which a task the full run blocks was passed early. Rows: clear passes (the baseline's own answers; a candidate that changes 3% of its 0/1 answers,
nothing worse; CrowS-Pairs gaps moved a fifth as much as a fine-tune's), equal quality (15% of answers changed;
CrowS-Pairs gaps moved as a fine-tune's), and regressions (clear: every accuracy task −10 points, or one ARC task;
less clear: every accuracy task −3 points or at its margin, CrowS-Pairs 3 margins worse in every entry, or English
+10 points of stereotype share in two categories), then the pooled entries' rows (none; tasks keeping their own
documents, as under xdist or --shard; every task at its margin or half of it with 6% of answers changed), then
rows under --early-stop-verdicts (a task stops only where every verdict it reports is the full run's); then the
exact rows (23 on): one 800-document 0/1 task alone in its session, a fresh baseline for every candidate, whose
candidate loses and gains given numbers of answers (the reviewer's 16, 20 and 24 lost; clear passes and
regressions), with how often --early-stop passed a candidate the full run blocks. StereoSet
is left to the real checkpoints (docs/measurements/early-stopping.md): its aggregates' bootstrap at every look makes 400 simulated
candidates take hours.

Time at 400 candidates on an idle core (under the rule before 2026-12-06): the eleven accuracy rows about 12
minutes, each CrowS-Pairs row about 5 minutes. The exact rows at 1,000 candidates: 1 to 2 minutes each at load 10.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gate_error_rates as sim  # noqa: E402

from pytest_modelbench.gate import early_stop, early_stop_pooled  # noqa: E402
from pytest_modelbench.gate.compare import TaskComparison, compare  # noqa: E402
from pytest_modelbench.gate.pooled import pooled_entries  # noqa: E402
from pytest_modelbench.gate.pooled_looks import pooled_look_blocks  # noqa: E402
from pytest_modelbench.gate.verdict import Verdict  # noqa: E402

QUIET_GAPS = 0.2  # a near-identical candidate's CrowS-Pairs gap noise, as a share of a fine-tune's


@dataclass(frozen=True)
class Row:
    label: str
    tasks: list[sim.Task]
    moves: dict[str, sim.Move]
    unchanged: bool = False  # the baseline's own answers
    quiet_gaps: bool = False  # CrowS-Pairs gap noise QUIET_GAPS of a fine-tune's
    pooled: bool = True  # the suites' pooled entries (False: '<suite>/* = 0' in modelbench_gate_weights)
    pooled_mode: str = "suite"  # how a task keeps documents for them (gate/early_stop.py, EarlyStop)
    full_run_verdicts: bool = False  # --early-stop-verdicts: stop only where every verdict is the full run's


@dataclass
class Judged:
    """One task of a candidate judged on all its documents and as --early-stop runs it."""

    full: TaskComparison
    early: TaskComparison
    scored: int  # documents --early-stop scored
    regressed_stop: bool  # stopped early as regressed: it scores no more for its suite's pooled entries


def judged(task: sim.Task, candidate, tolerance, pooled: str | None, full_run_verdicts: bool) -> Judged:
    full = compare(task.baseline, candidate, tolerance, task.documents)
    n = len(task.baseline.doc_keys)
    blocks = early_stop.scoring_blocks(n, task.key)
    candidate = replace(candidate, tolerance=tolerance)
    scored = np.array([], dtype=int)
    for block in blocks[:-1]:
        scored = np.concatenate([scored, block])
        settlement = early_stop.look(task.baseline, scored_part(task, candidate, scored), task.key,
                                     pooled == "task", documents_of(task, scored),
                                     full_run_verdicts=full_run_verdicts)
        if settlement is not None:
            return Judged(full, settlement.comparison, len(scored), settlement.verdict is Verdict.REGRESSED)
    return Judged(full, full, n, False)


def scored_part(task: sim.Task, candidate, scored: np.ndarray):
    return early_stop.restricted(candidate, [task.baseline.doc_keys[i] for i in scored])


def documents_of(task: sim.Task, scored: np.ndarray):
    return None if task.documents is None else [task.documents[i] for i in scored]


@dataclass(frozen=True)
class Blocks:
    """What the gate blocked in one judgement of a candidate."""

    tasks: frozenset  # the regressed task items
    pooled: frozenset  # the suites with a regressed pooled entry

    @property
    def release(self) -> bool:
        return bool(self.tasks or self.pooled)


def pooled_of(comparisons: dict[str, TaskComparison], suites: dict[str, str], split,
              full_run_verdicts: bool = False) -> tuple[list, list]:
    """(the suites' pooled entries, settled as the session settles them; the suites with some unsettled)."""
    pooling: dict[str, dict[str, list]] = {}
    for name, comparison in comparisons.items():
        pooling.setdefault(suites[name], {})[name] = list(comparison.pooling)
    entries, unsettled = [], []
    for suite, weight in split.pooled.items():
        stats = pooling.get(suite, {})
        settled, open_ = early_stop_pooled.settle_pooled(
            pooled_entries(suite, stats, alpha=0.05, level=0.05 * weight / split.total_weight), stats,
            {name for name in stats if comparisons[name].regressed}, full_run_verdicts)
        entries += settled
        if open_:
            unsettled.append(suite)
    return entries, unsettled


def blocks_of(comparisons: dict[str, TaskComparison], suites: dict[str, str], split,
              full_run_verdicts: bool = False) -> Blocks:
    pooled = {entry.suite for entry in pooled_of(comparisons, suites, split, full_run_verdicts)[0]
              if entry.verdict is Verdict.REGRESSED}
    return Blocks(frozenset(name for name, c in comparisons.items() if c.regressed), frozenset(pooled))


def resumed(tasks: Sequence[sim.Task], candidates: dict, tolerances: dict, judgements: dict[str, Judged],
            suites: dict[str, str], split, full_run_verdicts: bool) -> dict[str, TaskComparison]:
    """The early comparisons once the suites' pooled entries are settled, as the session settles them at its end
    (pytest_plugin/gate_hooks.py): a suite with a task stopped early looks at the same first share of every task's
    blocks, one more share a look, the stopped tasks scoring on to it, until its pooled entries are settled."""
    early = {name: j.early for name, j in judgements.items()}
    for suite in split.pooled:
        members = [t for t in tasks if suites[t.name] == suite]
        if all(judgements[t.name].scored == len(t.baseline.doc_keys) for t in members):
            continue
        blocks = {t.name: early_stop.scoring_blocks(len(t.baseline.doc_keys), t.key) for t in members}
        for look in range(1, early_stop.BLOCKS + 1):
            for task in members:
                j = judgements[task.name]
                own = blocks[task.name]
                seen = np.concatenate(own[:pooled_look_blocks(look, len(own))])
                if j.regressed_stop and len(seen) > j.scored:
                    continue  # a task stopped regressed scores no more
                j.scored = max(j.scored, len(seen))
                candidate = replace(candidates[task.name], tolerance=tolerances[task.name])
                pooling = early_stop.compared_so_far(task.baseline, scored_part(task, candidate, seen),
                                                     documents_of(task, seen)).pooling
                early[task.name] = replace(early[task.name], pooling=pooling)
            if suite not in pooled_of(early, suites, split, full_run_verdicts)[1]:
                break
    return early


def run_row(row: Row, candidates: int, rng: np.random.Generator) -> dict:
    split = sim.session_split(row.tasks)
    if not row.pooled:
        split = replace(split, pooled={})
    tolerances = {t.name: sim.tolerance(t, split) for t in row.tasks}
    suites = {t.name: t.suite for t in row.tasks}
    total = sum(len(t.baseline.doc_keys) for t in row.tasks)
    shifts: dict = {}
    scored = same_release = same_tasks = same_pooled = same_verdicts = blocked = passed_blocked = 0
    saved_noise = sim.GAP_NOISE_BASE, sim.GAP_NOISE_SLOPE
    if row.quiet_gaps:
        sim.GAP_NOISE_BASE, sim.GAP_NOISE_SLOPE = (QUIET_GAPS * x for x in saved_noise)
    try:
        for _ in range(candidates):
            drawn = {task.name: task.baseline if row.unchanged else sim.candidate(
                task, row.moves.get(task.name, sim.Move()), rng, shifts) for task in row.tasks}
            judgements = {task.name: judged(task, drawn[task.name], tolerances[task.name],
                                            row.pooled_mode if task.suite in split.pooled else None,
                                            row.full_run_verdicts)
                          for task in row.tasks}
            full = {name: j.full for name, j in judgements.items()}
            early = (resumed(row.tasks, drawn, tolerances, judgements, suites, split, row.full_run_verdicts)
                     if row.pooled_mode == "suite" else {name: j.early for name, j in judgements.items()})
            scored += sum(j.scored for j in judgements.values())
            full_blocks = blocks_of(full, suites, split)
            early_blocks = blocks_of(early, suites, split, row.full_run_verdicts)
            same_release += full_blocks.release == early_blocks.release
            same_tasks += full_blocks.tasks == early_blocks.tasks
            passed_blocked += bool(full_blocks.tasks - early_blocks.tasks)
            same_pooled += full_blocks.pooled == early_blocks.pooled
            same_verdicts += sum(full[name].verdict is early[name].verdict for name in full) / len(full)
            blocked += full_blocks.release
    finally:
        sim.GAP_NOISE_BASE, sim.GAP_NOISE_SLOPE = saved_noise
    return {"row": row.label, "tasks": len(row.tasks), "candidates": candidates,
            "documents_scored": scored / (candidates * total), "same_release_decision": same_release / candidates,
            "same_tasks_blocked": same_tasks / candidates, "same_pooled_blocked": same_pooled / candidates,
            "same_task_verdicts": same_verdicts / candidates, "blocked": blocked / candidates,
            "task_passed_where_full_run_blocks": passed_blocked / candidates}


@dataclass(frozen=True)
class ExactRow:
    """One 800-document 0/1 task (accuracy ACCURACY, alone in its session: alpha 0.05) whose candidate loses `lost`
    of the baseline's right answers and gains `gained` wrong ones, drawn afresh for every candidate."""

    label: str
    lost: int
    gained: int = 0
    documents: int = 800


def run_exact_row(row: ExactRow, candidates: int, rng: np.random.Generator) -> dict:
    """How often --early-stop's release decision differs from the full run's on exact candidates, and how often it
    passed one the full run blocks (the DISAGREEMENT bound), with the documents scored."""
    scored = differ = passed_blocked = blocked_full = blocked_early = same_verdicts = 0
    for _ in range(candidates):
        task = sim.accuracy_task("reviewer", "probe", row.documents, ("acc",), rng)
        split = sim.session_split([task])
        base = task.baseline.values["acc"]
        values = base.copy()
        values[rng.choice(np.flatnonzero(base == 1), row.lost, replace=False)] = 0.0
        values[rng.choice(np.flatnonzero(base == 0), row.gained, replace=False)] = 1.0
        j = judged(task, replace(task.baseline, values={"acc": values}), sim.tolerance(task, split), None, False)
        full, early = j.full.verdict is Verdict.REGRESSED, j.early.verdict is Verdict.REGRESSED
        scored += j.scored
        differ += full != early
        passed_blocked += full and not early
        blocked_full += full
        blocked_early += early
        same_verdicts += j.full.verdict is j.early.verdict
    return {"row": row.label, "candidates": candidates, "documents_scored": scored / (candidates * row.documents),
            "blocked": blocked_full / candidates, "blocked_early": blocked_early / candidates,
            "different_release_decision": differ / candidates,
            "passed_where_full_run_blocks": passed_blocked / candidates,
            "same_task_verdicts": same_verdicts / candidates}


EXACT_ROWS = [
    ExactRow("800 documents: the baseline's own answers", 0),
    ExactRow("800 documents: 4 answers lost and 4 gained (1% changed, no net change)", 4, 4),
    ExactRow("800 documents: 12 lost and 12 gained (3% changed, no net change)", 12, 12),
    ExactRow("800 documents: 16 lost, none gained (−2 points)", 16),
    ExactRow("800 documents: 20 lost, none gained (−2.5 points)", 20),
    ExactRow("800 documents: 24 lost, none gained (−3 points)", 24),
    ExactRow("800 documents: 40 lost, none gained (−5 points)", 40),
    ExactRow("800 documents: 80 lost, none gained (−10 points)", 80),
    ExactRow("800 documents: 12 lost, 4 gained (−1 point, the margin; 2% changed)", 12, 4),
]


def rows(arc: Sequence[sim.Task], bangla: Sequence[sim.Task], bias: Sequence[sim.Task]) -> list[Row]:
    accuracy = list(arc) + list(bangla)
    crows_pairs = [t for t in bias if t.name.startswith("crows_pairs")]
    return [
        Row("accuracy suites (17 tasks): the baseline's own answers", accuracy, {}, unchanged=True),
        Row("accuracy suites: 3% of answers changed, nothing worse", accuracy,
            {t.name: sim.Move(discordance=0.03) for t in accuracy}),
        Row("accuracy suites: equal quality, 15% of answers changed", accuracy, {}),
        Row("accuracy suites: every task −10 points", accuracy, {t.name: sim.Move(10.0) for t in accuracy}),
        Row("accuracy suites: one ARC task −10 points, the others equal quality", accuracy,
            {arc[0].name: sim.Move(10.0)}),
        Row("accuracy suites: every task −3 points", accuracy, {t.name: sim.Move(3.0) for t in accuracy}),
        Row("accuracy suites: every task at its margin (−1 point)", accuracy,
            {t.name: sim.Move(1.0) for t in accuracy}),
        Row("CrowS-Pairs English and French: gaps moved a fifth of a fine-tune's, nothing worse", crows_pairs, {},
            quiet_gaps=True),
        Row("CrowS-Pairs English and French: equal quality (gaps moved as a fine-tune's)", crows_pairs, {}),
        Row("CrowS-Pairs English and French: every entry 3 margins worse", crows_pairs,
            {t.name: sim.Move(3.0) for t in crows_pairs}),
        Row("CrowS-Pairs English and French: English age and religion +10 points", crows_pairs,
            {crows_pairs[0].name: sim.Move(share_up={"age": 0.10, "religion": 0.10})}),
        Row("accuracy suites without pooled entries ('<suite>/* = 0'): 3% of answers changed, nothing worse", accuracy,
            {t.name: sim.Move(discordance=0.03) for t in accuracy}, pooled=False),
        Row("accuracy suites, tasks keeping their documents for the pooled entries (as under xdist or --shard): 3% of "
            "answers changed, nothing worse", accuracy, {t.name: sim.Move(discordance=0.03) for t in accuracy},
            pooled_mode="task"),
        Row("accuracy suites: every task −1 point (its margin), 6% of answers changed", accuracy,
            {t.name: sim.Move(1.0, discordance=0.06) for t in accuracy}),
        Row("accuracy suites: every task −½ point, 6% of answers changed", accuracy,
            {t.name: sim.Move(0.5, discordance=0.06) for t in accuracy}),
        Row("--early-stop-verdicts, accuracy suites: the baseline's own answers", accuracy, {}, unchanged=True,
            full_run_verdicts=True),
        Row("--early-stop-verdicts, accuracy suites: 3% of answers changed, nothing worse", accuracy,
            {t.name: sim.Move(discordance=0.03) for t in accuracy}, full_run_verdicts=True),
        Row("--early-stop-verdicts, accuracy suites: equal quality, 15% of answers changed", accuracy, {},
            full_run_verdicts=True),
        Row("--early-stop-verdicts, accuracy suites: every task −10 points", accuracy,
            {t.name: sim.Move(10.0) for t in accuracy}, full_run_verdicts=True),
        Row("--early-stop-verdicts, accuracy suites: every task −3 points", accuracy,
            {t.name: sim.Move(3.0) for t in accuracy}, full_run_verdicts=True),
        Row("--early-stop-verdicts, CrowS-Pairs English and French: gaps moved a fifth of a fine-tune's, nothing "
            "worse", crows_pairs, {}, quiet_gaps=True, full_run_verdicts=True),
        Row("--early-stop-verdicts, CrowS-Pairs English and French: every entry 3 margins worse", crows_pairs,
            {t.name: sim.Move(3.0) for t in crows_pairs}, full_run_verdicts=True),
    ]


def main() -> None:
    args = sim.arguments(__doc__.splitlines()[0])
    rng = np.random.default_rng(args.seed)
    arc, bangla, bias = sim.shipped_tasks(rng)
    suite_rows = rows(arc, bangla, bias)
    every = suite_rows + EXACT_ROWS
    chosen = [every[int(i) - 1] for i in args.rows] if args.rows else every
    print(f"{args.candidates} candidates per row, seed {args.seed}; early stopping: {early_stop.BLOCKS} blocks of at "
          f"least {early_stop.MIN_BLOCK} documents, disagreement budget {early_stop.DISAGREEMENT}\n")
    if any(row in suite_rows for row in chosen):
        print("| # | row | documents scored | same release decision as the full run | same tasks blocked | same "
              "pooled entries blocked | same task verdicts | blocked (full run) | a task the full run blocks passed "
              "early |")
        print("|---|---|---|---|---|---|---|---|---|")
        percent = ("documents_scored", "same_release_decision", "same_tasks_blocked", "same_pooled_blocked",
                   "same_task_verdicts", "blocked", "task_passed_where_full_run_blocks")
        sim.print_rows(every, [row for row in chosen if row in suite_rows],
                       lambda row: run_row(row, args.candidates, rng),
                       lambda result: [f"{100 * result[key]:.1f}%" for key in percent], args.json_out)
    if any(row in EXACT_ROWS for row in chosen):
        print("\n| # | candidate | documents scored | blocked (full run) | blocked (--early-stop) | release decision "
              "differs | passed early where the full run blocks | same task verdict |")
        print("|---|---|---|---|---|---|---|---|")
        percent = ("documents_scored", "blocked", "blocked_early", "different_release_decision",
                   "passed_where_full_run_blocks", "same_task_verdicts")
        sim.print_rows(every, [row for row in chosen if row in EXACT_ROWS],
                       lambda row: run_exact_row(row, args.candidates, rng),
                       lambda result: [f"{100 * result[key]:.1f}%" for key in percent], args.json_out)


if __name__ == "__main__":
    main()
