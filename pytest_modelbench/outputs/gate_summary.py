"""What the terminal summary, --md-report and --html-report all say about the gate's results: the per-task detail,
the counts, the false-block bound, where the baselines came from, the pooled entries' rows.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from pytest_modelbench.gate.alpha_split import DEFAULT_WEIGHT
from pytest_modelbench.gate.pooled import PooledEntry
from pytest_modelbench.gate.result import STATUS_COMPARED, STATUS_ERROR, GateResult, outcome_rank
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.text_format import format_delta, format_number, format_p

COLUMNS_NOTE = (
    "how to read it: gate = the task's verdict against its baseline (a regression fails the task; pass, improved "
    "and inconclusive pass); detail = what moved, counted in entries (one per metric overall and per category, each "
    "compared with the baseline); alpha share = the false-block rate the task was tested at, and its share of the "
    "run's alpha (its weight over the gated tasks' total); caught at 80% = the smallest drop of each overall score "
    "that this run blocks 4 times in 5 (smaller drops may pass); false blocks = how often a model no worse than its "
    "baseline is blocked by chance"
)
TASK_HEADER = ("task", "gate", "detail", "alpha share", "caught at 80%")
POOLED_HEADER = ("suite (pooled)", "metric", "tasks", "n", "baseline", "candidate", "delta", "margin", "p-value",
                 "MDE", "level", "verdict")
POOLED_NOTE = (
    "pooled: the suite's metric over the paired documents of all its compared tasks (a document several tasks hold "
    "counted once, related documents tested as one cluster), against a margin of half the tasks' own: it sees a drop "
    "spread over every task, each inside its margin; level = its share of the run's alpha"
)


def alpha_share(result: GateResult) -> str:
    """The task's level and its share of alpha, '0.0125 (25%)'; '-' when not compared."""
    return "-" if result.level is None else f"{result.level:.3g} ({100 * result.weight / result.total_weight:.3g}%)"


def power(result: GateResult) -> str:
    """The smallest regression of each overall entry that the gate catches with 80% power."""
    return ", ".join(f"{e['metric']} {format_number(e['mde'])}" for e in result.entries if e["category"] is None)


def task_row(result: GateResult) -> tuple[str, ...]:
    """A task's cells of TASK_HEADER."""
    return result.task, result.outcome, detail(result), alpha_share(result), power(result)


def entry_label(entry: dict[str, Any]) -> str:
    return entry["metric"] + ("" if entry["category"] is None else f" [{entry['category']}]")


def summary_counts(results: Sequence[GateResult]) -> str:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    order = sorted(counts, key=outcome_rank)
    return ", ".join(f"{counts[o]} {o}" for o in order)


def _noise_detail(result: GateResult) -> str:
    count = len(result.noise_warnings)
    return f"{count} margin{'' if count == 1 else 's'} below the noise floor" if count else ""


def detail(result: GateResult) -> str:
    if result.status != STATUS_COMPARED:
        note = "; ".join(part for part in (result.note, _noise_detail(result)) if part)
        overall = [s for s in result.scores if s["category"] is None]
        if not overall:
            return note
        scores = ", ".join(f"{s['metric']} {format_number(s['value'])} (n={s['n']})" for s in overall)
        return f"{note}; this run: {scores}"
    regressed = result.entries_with(Verdict.REGRESSED.value)
    improved = result.entries_with(Verdict.IMPROVED.value)
    inconclusive = result.entries_with(Verdict.INCONCLUSIVE.value)
    parts = []
    if regressed:
        e = regressed[0]
        parts.append(f"{len(regressed)} regressed, worst {entry_label(e)} {format_delta(e['delta'])} (p={format_p(e['p_value'])})")
    if improved:
        e = improved[-1]  # the largest improvement (entries are worst first)
        parts.append(f"{len(improved)} improved, e.g. {entry_label(e)} {format_delta(e['delta'])} (p={format_p(e['p_value'])})")
    if inconclusive:
        parts.append(
            f"{len(inconclusive)} inconclusive (largest MDE {format_number(max(x['mde'] for x in inconclusive))})"
        )
    if not parts:
        parts.append(f"{len(result.entries)} entries within the margin")
    if result.note:
        parts.append(result.note)
    if result.noise_warnings:
        parts.append(_noise_detail(result))
    return "; ".join(parts)


def false_block_bound(results: Sequence[GateResult]) -> float | None:
    """The run's false-block bound when nothing regressed past its margin: the sum of the compared tasks' levels
    (Bonferroni: it holds whatever alpha each task was given and whatever the dependence between tasks); None when
    no task was compared."""
    levels = [r.level for r in results if r.level is not None]
    return min(1.0, sum(levels)) if levels else None


def _levels_text(compared: Sequence[GateResult], rate: Callable[[GateResult], float]) -> str:
    """`rate` of each task, the most common one 'per task' and the others by task: '0.0125 per task, 0.125 for x'."""
    by_value: dict[float, list[str]] = {}
    for result in compared:
        by_value.setdefault(rate(result), []).append(result.task)
    common = max(by_value, key=lambda value: len(by_value[value]))
    others = [
        f"{value:.3g} for {', '.join(sorted(tasks))}" for value, tasks in sorted(by_value.items()) if value != common
    ]
    return ", ".join([f"{common:.3g} per task", *others])


def _weights_text(compared: Sequence[GateResult]) -> str:
    """The tasks' weights when they differ, the most common one as 'others': 'weighted: bias/crows 3, others 1'."""
    weights = {result.task: result.weight for result in compared}
    values = list(weights.values())
    if len(set(values)) < 2:
        return ""
    usual = max(set(values), key=lambda weight: (values.count(weight), weight == DEFAULT_WEIGHT))
    named = ", ".join(f"{task} {weight:g}" for task, weight in sorted(weights.items()) if weight != usual)
    return f"weighted: {named}, others {usual:g}"


def error_rate_line(results: Sequence[GateResult], pooled: Sequence[PooledEntry] = ()) -> str | None:
    """What the gate's blocks are worth: the false-block bound of the run (its tasks' and its pooled families'
    levels summed) and how it is shared."""
    compared = [r for r in results if r.alpha is not None]
    bound = false_block_bound(compared)
    if bound is None:
        return None
    pooled_levels = {e.suite: e.level for e in pooled}
    bound = min(1.0, bound + sum(pooled_levels.values()))
    pooled_text = "pooled: " + ", ".join(f"{suite} {level:.3g}" for suite, level in sorted(pooled_levels.items()))
    if all(r.tasks == 1 for r in compared) and len(results) > 1:
        unused = "; the tasks' weights are not used" if any(r.weight != DEFAULT_WEIGHT for r in compared) else ""
        return (
            f"false blocks: at most {_levels_text(compared, lambda r: r.alpha)} when nothing regressed past its "
            f"margin (--gate-error-control=task{unused}){'; ' + pooled_text if pooled_levels else ''}; up to "
            f"{bound:.4g} for the {len(compared)} compared task(s)"
            f"{f' and {len(pooled_levels)} pooled suite(s)' if pooled_levels else ''} together"
        )
    gated = max(r.tasks for r in compared)
    tasks = f"{gated} gated task(s)" if len(compared) == gated else f"{len(compared)} compared of {gated} gated tasks"
    shares = "; ".join(text for text in (_levels_text(compared, lambda r: r.level), _weights_text(compared),
                                         pooled_text if pooled_levels else "") if text)
    return (f"false blocks: at most {bound:.4g} for the {tasks} together when nothing regressed past its margin "
            f"({shares})")


def baseline_ref_lines(results: Sequence[GateResult]) -> list[str]:
    """With --baseline-ref: where the baselines came from, and each baseline file the working tree changed."""
    refs = sorted({r.baseline_ref for r in results if r.baseline_ref})
    if not refs:
        return []
    lines = [f"baselines read from git ref {', '.join(refs)}, not from the working tree"]
    lines += [
        f"working tree differs from {r.baseline_ref}: {r.baseline} (task {r.task}); the gate used the ref's file"
        for r in sorted(results, key=lambda r: r.baseline) if r.working_tree_differs
    ]
    return lines



def integrity_lines(result: GateResult) -> list[str]:
    """What the task's run could not score or parse (gate/integrity.py): one line of counts when anything was
    retried, unscored or unparseable, then, for a task in `error`, its counts per category and a few documents."""
    integrity = result.integrity
    if not integrity or not (integrity["retried_requests"] or integrity["unscored"] or integrity["invalid_outputs"]):
        return []
    lines = [f"{result.task}: {integrity['summary']}"]
    if result.status != STATUS_ERROR:
        return lines
    parsed = integrity["invalid_outputs"] is not None  # the task has a parsing filter
    lines += [f"  {category}: {counts['unscored']} of {counts['documents']} unscored"
              + (f", {counts['invalid_outputs']} unparseable" if parsed else "")
              for category, counts in integrity["by_category"].items()
              if counts["unscored"] or counts["invalid_outputs"]]
    lines += [f"  e.g. document {p['doc_id']}{_in(p['category'])}: unscored: {p['problem']}"
              for p in integrity["unscored_examples"]]
    lines += [f"  e.g. document {p['doc_id']}{_in(p['category'])}: no filter could parse {p['problem']}"
              for p in integrity["invalid_examples"]]
    return lines


def _in(category: str | None) -> str:
    return "" if category is None else f" ({category})"


def pooled_rows(entries: Sequence[PooledEntry]) -> list[tuple[str, ...]]:
    return [
        (e.suite, e.metric, str(len(e.tasks)), f"{e.n:,} of {e.n + e.unscored:,}" if e.unscored else str(e.n),
         format_number(e.baseline), format_number(e.candidate),
         format_delta(e.delta), format_number(e.margin), format_p(e.p_value), format_number(e.mde),
         f"{e.level:.3g}", e.verdict.value)
        for e in entries
    ]
