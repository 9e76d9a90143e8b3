"""The errors a gated task fails with, which pytest prints as its failure, rendered from why the judge failed it
(gate/judge.py, `Judgement.failure`): a regression's table of entries (worst first), a re-baseline's scores with how
to compare, a missing or corrupt baseline's one line. `entry_row` is the one row format of an entry, which every
report uses too.
"""

from __future__ import annotations

from typing import Any, Sequence

from pytest_modelbench.errors import BaselineError, GateFailure, ModelbenchError, RunIntegrityError
from pytest_modelbench.gate.compare import Entry, TaskComparison
from pytest_modelbench.gate.judge import (
    BaselineProblem, IntegrityFailure, RebaselineRequired, Regression, TaskFailure,
)
from pytest_modelbench.gate.result import entry_json
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.text_format import format_delta, format_number, format_p, format_table

TABLE_HEADER = ("metric", "category", "n", "baseline", "candidate", "delta", "margin", "p-value", "MDE", "verdict")
MAX_TABLE_ROWS = 40
LEGEND = (
    "delta is oriented so that negative is worse (for an ideal-point metric: the distance from the ideal); "
    "an entry regresses when the data show it worse than the baseline by more than its margin; p-value: of "
    "\"not worse than the margin\", Holm-adjusted over the task's entries (improved entries: of \"not better than "
    "the margin\"); MDE = smallest regression the gate catches with 80% power"
)
SCORES_HEADER = ("metric", "category", "n", "this run", "baseline (other settings)")


def entry_row(entry: dict[str, Any]) -> tuple[str, ...]:
    """An entry (gate/result.py, entry_json) as the cells of TABLE_HEADER."""
    return (
        entry["metric"], "(all)" if entry["category"] is None else entry["category"], str(entry["n"]),
        format_number(entry["baseline"]), format_number(entry["candidate"]), format_delta(entry["delta"]),
        format_number(entry["margin"]), format_p(entry["p_value"]), format_number(entry["mde"]), entry["verdict"],
    )


def comparison_table(entries: Sequence[Entry], max_rows: int = MAX_TABLE_ROWS) -> list[str]:
    rows = [entry_row(entry_json(e)) for e in entries[:max_rows]]
    lines = format_table(TABLE_HEADER, rows)
    if len(entries) > max_rows:
        rest = entries[max_rows:]
        counts = ", ".join(f"{sum(e.verdict is v for e in rest)} {v.value}" for v in Verdict if any(e.verdict is v for e in rest))
        lines.append(f"... {len(rest)} more rows ({counts})")
    return lines


def failure_message(comparison: TaskComparison, baseline_path: Any, baseline_name: str, model: str, baseline_model: str) -> str:
    regressed = comparison.regressed
    head = (
        f"task '{comparison.task}' regressed against baseline '{baseline_name}' ({baseline_path}): "
        f"{len(regressed)} of {len(comparison.entries)} entries worse by more than the margin "
        f"(candidate {model}, baseline recorded with {baseline_model})"
    )
    return "\n".join([head, "", *comparison_table(comparison.worst_first()), "", LEGEND])


def compare_hint(baseline_name: str) -> str:
    """What to do when the run's settings differ from the baseline's."""
    return (
        "To compare at these settings, record a baseline of their own from a trusted model, under another name: "
        "`pytest --snapshot-update --baseline-name=<new name>` with this run's options, then gate with "
        f"--baseline-name=<new name>. To make these settings baseline '{baseline_name}' instead, review the change "
        "and run with --snapshot-update."
    )


def score_row(score: dict[str, Any]) -> tuple[str, ...]:
    """A score of a task not compared (gate/result.py, score_rows) as the cells of SCORES_HEADER."""
    return (
        score["metric"], "(all)" if score["category"] is None else score["category"], str(score["n"]),
        format_number(score["value"]),
        "-" if score["baseline_n"] is None else f"{format_number(score['baseline'])} (n={score['baseline_n']})",
    )


def rebaseline_message(problems: Sequence[str], baseline_path: Any, baseline_name: str,
                       scores: Sequence[dict[str, Any]]) -> str:
    """The failure of a task whose baseline was recorded under other settings: the reason first (pytest's short
    summary shows the first line), this run's scores, and how to compare."""
    head = (
        f"re-baseline required: {'; '.join(problems)}. Not compared with baseline '{baseline_name}' "
        f"({baseline_path}): it was recorded under other settings, and comparing would report false regressions "
        "(the gate fails closed)."
    )
    table = format_table(SCORES_HEADER, [score_row(s) for s in scores])
    return "\n".join([head, "", "This run's scores (not gated):", *table, "", compare_hint(baseline_name)])


def integrity_message(failure: IntegrityFailure) -> str:
    """The failure of a task in `error` (gate/integrity.py): why first (pytest's short summary shows the first line),
    what was counted, a few documents, and what to do."""
    return "\n".join([
        f"error (the run, not the model): task '{failure.task}': {'; '.join(failure.problems)}. Not judged: no "
        "verdict comes from part of a task's documents.", "", failure.summary,
        *(f"  {line}" for line in failure.examples), "",
        "Nothing of a failed request was cached: re-run once the backend is healthy, and only what is missing is "
        "scored (docs/integrity.md).",
    ])


def failure_error(failure: TaskFailure) -> ModelbenchError:
    """The error a task fails with, for why the judge failed it."""
    if isinstance(failure, Regression):
        message = failure_message(failure.comparison, failure.baseline_path, failure.baseline_name, failure.model,
                                  failure.baseline_model)
        if failure.early_stop_note is not None:
            message += f"\n({failure.early_stop_note}: --early-stop; the table is of the documents scored)"
        if failure.invalid_note is not None:
            message = message.replace("\n", f"\nwhy: {failure.invalid_note}\n", 1)
        return GateFailure(message)
    if isinstance(failure, IntegrityFailure):
        return RunIntegrityError(integrity_message(failure))
    if isinstance(failure, RebaselineRequired):
        return BaselineError(rebaseline_message(failure.problems, failure.baseline_path, failure.baseline_name,
                                                failure.scores))
    assert isinstance(failure, BaselineProblem)
    return BaselineError(failure.message)
