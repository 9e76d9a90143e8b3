"""The gate's lines in pytest's terminal summary (and the merge's output): the task table, what to look at, the
pooled entries."""

from __future__ import annotations

from typing import Sequence

from pytest_modelbench.outputs.failure_messages import compare_hint
from pytest_modelbench.gate.noise_floor import NoiseWarning
from pytest_modelbench.gate.pooled import PooledEntry
from pytest_modelbench.gate.result import STATUS_COMPARED, STATUS_REBASELINE, GateResult, sorted_results
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.outputs.gate_summary import (
    COLUMNS_NOTE,
    POOLED_HEADER,
    POOLED_NOTE,
    TASK_HEADER,
    baseline_ref_lines,
    entry_label,
    error_rate_line,
    integrity_lines,
    pooled_rows,
    summary_counts,
    task_row,
)
from pytest_modelbench.text_format import format_delta, format_number, format_p, format_table

RUNS_HEADING = ("the runs: requests retried, documents unscored, answers no filter could parse (over its limits a task "
                "is `error`: the run, not the model, and nothing of it is judged)")
POOLED_EARLY_STOP_NOTE = (
    "n 'k of N': --early-stop scored k of the pooled tasks' N documents; the verdict is the full run's where they "
    "settle it, else theirs and never regressed (an early stop can miss a regression, never add a block)"
)


def noise_lines(results: Sequence[GateResult]) -> list[str]:
    """The entries whose margin is below the pipeline's measured noise (gate/noise_floor.py), by task."""
    lines = []
    for result in results:
        if not result.noise_warnings:
            continue
        lines += ["", f"{result.task}: margins below the pipeline's own noise (measured by scoring the baseline's "
                      f"checkpoint again with {result.noise_measured_with}); verdicts unchanged"]
        lines += [f"  noise floor   {NoiseWarning.from_json(raw).describe()}" for raw in result.noise_warnings]
    return lines


def count_line(results: Sequence[GateResult], custom_tests: int = 0) -> str:
    """How many task items the gate saw and how they ended; the custom tests pytest counted besides them."""
    line = f"{len(results)} task(s): {summary_counts(results)}"
    if custom_tests:
        line += f"; {custom_tests} custom test(s) besides, not gated (pytest's totals count both)"
    return line


def terminal_lines(results: Sequence[GateResult], max_entries: int = 8, custom_tests: int = 0,
                   pooled: Sequence[PooledEntry] = ()) -> list[str]:
    results = sorted_results(results)
    lines = [count_line(results, custom_tests)]
    rate = error_rate_line(results, pooled)
    if rate:
        lines.append(rate)
    lines += baseline_ref_lines(results)
    lines += format_table(TASK_HEADER, [task_row(r) for r in results])
    lines.append(COLUMNS_NOTE)
    lines += noise_lines(results)
    runs = [line for result in results for line in integrity_lines(result)]
    if runs:
        lines += ["", RUNS_HEADING, *runs]
    rebaselines = [r for r in results if r.status == STATUS_REBASELINE]
    if rebaselines:
        lines += ["", f"{len(rebaselines)} task(s) not compared: their settings differ from the baseline's. "
                  + compare_hint(rebaselines[0].baseline_name)]
    for result in results:
        notable = [e for e in result.entries if e["verdict"] in (Verdict.INCONCLUSIVE.value, Verdict.IMPROVED.value)]
        if result.status != STATUS_COMPARED or not notable:
            continue
        lines.append("")
        lines.append(f"{result.task}: entries to look at")
        for e in notable[:max_entries]:
            if e["verdict"] == Verdict.INCONCLUSIVE.value:
                lines.append(
                    f"  inconclusive  {entry_label(e)}: n={e['n']}, delta {format_delta(e['delta'])}, "
                    f"margin {format_number(e['margin'])}; a regression smaller than {format_number(e['mde'])} "
                    "would likely go unseen (passes)"
                )
            else:
                lines.append(
                    f"  improved      {entry_label(e)}: {format_number(e['baseline'])} -> "
                    f"{format_number(e['candidate'])} (p={format_p(e['p_value'])}); "
                    "run --snapshot-update to raise the baseline"
                )
        if len(notable) > max_entries:
            lines.append(f"  ... {len(notable) - max_entries} more")
    return lines


def pooled_lines(entries: Sequence[PooledEntry], by_merge: Sequence[str] = (), updating: bool = False,
                 problems: Sequence[str] = ()) -> list[str]:
    """The summary's lines for the suites' pooled entries; `by_merge`: suites whose pooled entries this shard leaves
    to the merge; `updating`: --snapshot-update, under which a regressed pooled entry does not fail; `problems`:
    why --early-stop could not settle a suite's pooled entries (the session fails)."""
    lines = []
    if by_merge:
        lines += ["", f"pooled entries of {', '.join(by_merge)}: judged when the shards' run records are merged "
                      "(python -m pytest_modelbench merge)"]
    if entries:
        lines += ["", *format_table(POOLED_HEADER, pooled_rows(entries)), POOLED_NOTE]
        if any(e.unscored for e in entries):
            lines.append(POOLED_EARLY_STOP_NOTE)
        regressed = [e for e in entries if e.verdict is Verdict.REGRESSED]
        named = f"{len(regressed)} pooled entr{'y' if len(regressed) == 1 else 'ies'} regressed " \
                f"({', '.join(f'{e.suite} {e.metric}' for e in regressed)})"
        if regressed and updating:
            suites = sorted({e.suite for e in regressed})
            lines.append(f"{named}: not failing under --snapshot-update, which re-records only tasks outside their own "
                         f"band; to accept the new level of {', '.join(suites)}, remove its baselines and record them "
                         "again")
        elif regressed:
            lines.append(f"the gate fails: {named}")
    lines += [f"the gate fails: {problem}" for problem in problems]
    return lines

