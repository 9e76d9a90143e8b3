"""--md-report: the gate's results as markdown for a pull-request comment; text from task files and data is
escaped, so nothing in it renders as markup."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Sequence

from pytest_modelbench.outputs.failure_messages import LEGEND, MAX_TABLE_ROWS, TABLE_HEADER, entry_row
from pytest_modelbench.outputs.terminal import RUNS_HEADING
from pytest_modelbench.gate.pooled import PooledEntry
from pytest_modelbench.gate.result import STATUS_COMPARED, GateResult, sorted_results
from pytest_modelbench.gate.verdict import Verdict
from pytest_modelbench.outputs.gate_summary import (
    COLUMNS_NOTE,
    POOLED_HEADER,
    POOLED_NOTE,
    TASK_HEADER,
    baseline_ref_lines,
    error_rate_line,
    integrity_lines,
    pooled_rows,
    summary_counts,
    task_row,
)

if TYPE_CHECKING:
    from pytest_modelbench.gate.decision import SessionOutcome

_MD_SPECIAL = re.compile(r"[\\`*\[\]|!#~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_HTML_SPECIAL = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _md_escape(text: Any) -> str:
    """Text from task files and data (names, categories, paths) as literal markdown: no HTML, link, emphasis or
    table cell boundary passes through to a rendered pull-request comment. Intraword underscores stay as they are
    (task names read `crows_pairs_english`), since they start no emphasis."""
    text = re.sub(r"\s*[\r\n]+\s*", " ", str(text))
    text = "".join(_HTML_SPECIAL.get(char, char) for char in text)
    return _MD_SPECIAL.sub(lambda match: "\\" + match.group(0), text)


def markdown(results: Sequence[GateResult], baseline_name: str, outcome: SessionOutcome, unused: Sequence[str] = (),
             pooled: Sequence[PooledEntry] = ()) -> str:
    """`outcome`: the session's (gate/decision.py), which its exit status says too."""
    results = sorted_results(results)
    tasks = f"{len(results)} task(s): {summary_counts(results)}" if results else "no modelbench task ran"
    lines = ["## pytest-modelbench baseline gate", "",
             f"Baseline **{_md_escape(baseline_name)}** · gate **{outcome.status}** · {tasks}"]
    if outcome.reasons:
        lines += ["", *(f"- {_md_escape(reason)}" for reason in outcome.reasons)]
    if results:
        rate = error_rate_line(results, pooled)
        if rate:
            lines += ["", _md_escape(rate)]
        ref_lines = [_md_escape(line) for line in baseline_ref_lines(results)]
        if ref_lines:
            lines += ["", ref_lines[0], "", *(f"- {line}" for line in ref_lines[1:])]
        lines += ["", "| " + " | ".join(TASK_HEADER) + " |", "|" + "---|" * len(TASK_HEADER)]
        lines += ["| " + " | ".join(_md_escape(c) for c in task_row(r)) + " |" for r in results]
        lines += ["", _md_escape(COLUMNS_NOTE)]
        runs = [line for result in results for line in integrity_lines(result)]
        if runs:
            lines += ["", _md_escape(RUNS_HEADING[0].upper() + RUNS_HEADING[1:]), "",
                      *(f"- {_md_escape(line.strip())}" for line in runs)]
        if pooled:
            lines += ["", "| " + " | ".join(POOLED_HEADER) + " |", "|" + "---|" * len(POOLED_HEADER)]
            lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in pooled_rows(pooled)]
            lines += ["", _md_escape(POOLED_NOTE)]
        for result in results:
            if not result.entries or result.verdict == Verdict.PASS.value:
                continue
            heading = result.verdict if result.status == STATUS_COMPARED else f"{result.verdict}, {result.status}"
            lines += ["", f"### {_md_escape(result.task)}: {heading}", ""]
            lines.append("| " + " | ".join(TABLE_HEADER) + " |")
            lines.append("|" + "---|" * len(TABLE_HEADER))
            for e in result.entries[:MAX_TABLE_ROWS]:
                cells = [_md_escape(c) for c in entry_row(e)]
                if e["verdict"] == Verdict.REGRESSED.value:
                    cells[-1] = f"**{cells[-1]}**"
                lines.append("| " + " | ".join(cells) + " |")
            if len(result.entries) > MAX_TABLE_ROWS:
                lines.append(f"\n... {len(result.entries) - MAX_TABLE_ROWS} more rows")
        lines += ["", f"<sub>{LEGEND}</sub>"]
    if unused:
        lines += ["", f"Unused baselines ({len(unused)}): " + ", ".join(_md_escape(u) for u in unused)]
    return "\n".join(lines) + "\n"
