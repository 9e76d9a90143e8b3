"""The session's decision (gate/decision.py) rendered: its section of the terminal summary and the --md-report and
--html-report files. The pytest layer and a merge of shards both report through these."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from pytest_modelbench.gate.decision import SessionDecision
from pytest_modelbench.gate.ratchet import ACCEPT_OPTION, AcceptedRegression, unmatched_acceptances
from pytest_modelbench.gate.result import GateResult
from pytest_modelbench.outputs.html_report import html_page
from pytest_modelbench.outputs.markdown import markdown
from pytest_modelbench.outputs.terminal import pooled_lines, terminal_lines


def terminal_section(decision: SessionDecision, *, baselines_missing: str | None = None, update: bool = False,
                     accepted: Sequence[AcceptedRegression] = ()) -> tuple[str, list[str]]:
    """The summary's section title and lines (no lines: nothing to say)."""
    if decision.score_only:
        if not decision.results:
            return "", []
        return "modelbench gate: not run (--score-only)", [
            f"no gate ran: the scores of {len(decision.results)} task(s) were compared with no baseline; "
            "they pass no release gate"
        ]
    shown = decision.results or decision.unused or decision.interrupted_by is not None
    lines: list[str] = [decision.outcome().headline()] if shown else []
    if decision.results and baselines_missing:
        lines.append(baselines_missing)
    if decision.results:
        pooled = decision.pooled()
        lines += terminal_lines(decision.results, custom_tests=len(decision.custom_tests), pooled=pooled)
        lines += pooled_lines(pooled, by_merge=sorted(decision.pooled_weights) if decision.pooled_by_merge else [],
                              updating=decision.update, problems=decision.pooled_problems)
        lines += reference_lines(decision.results)
        lines += [f"{ACCEPT_OPTION}={a} named no regressed entry of this run: nothing was lowered for it (check its "
                  "task, metric and category against the table above)"
                  for a in unmatched_acceptances(accepted, decision.results)]
    lines += unused_lines(decision, update)
    return f"modelbench gate (baseline '{decision.baseline_name}')", lines


def write_reports(decision: SessionDecision, *, md_report: Path | None, html_report: Path | None,
                  write: Callable[[str, Path, str], None]) -> None:
    """The markdown and HTML reports, through `write(option, path, text)`."""
    unused = [decision.display(u) for u in sorted(decision.unused)]
    pooled = decision.pooled()
    outcome = decision.outcome()
    if md_report is not None:
        write("--md-report", md_report, markdown(decision.results, decision.baseline_name, outcome, unused, pooled))
    if html_report is not None:
        write("--html-report", html_report,
              html_page(decision.results, decision.baseline_name, outcome, unused, pooled))


def reference_lines(results: Sequence[GateResult]) -> list[str]:
    """--snapshot-update: per task whose baseline it touched, what each entry's reference became (gate/ratchet.py)."""
    lines = []
    for result in sorted(results, key=lambda r: r.task):
        if result.references:
            lines.append(f"references of {result.task} ({result.baseline}):")
            lines += [f"  {line}" for line in result.references]
    return lines


def unused_lines(decision: SessionDecision, update: bool) -> list[str]:
    """The unused baselines, or those --snapshot-update deleted."""
    if not decision.unused:
        return []
    count = len(decision.unused)
    noun = "baseline" if count == 1 else "baselines"
    if decision.deleted:
        lines = [f"{count} unused {noun} deleted."]
        lines += [f"Deleted {Path(p).stem} ({decision.display(p)})" for p in sorted(decision.deleted)]
        return lines
    lines = [f"{count} {noun} unused."]
    lines += [f"Unused {Path(p).stem} ({decision.display(p)})" for p in sorted(decision.unused)]
    if not update:
        lines.append("Re-run pytest with --snapshot-update to delete unused baselines.")
    return lines
