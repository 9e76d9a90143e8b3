"""The session's decision: every gated task's result, the unused baselines, the exit status and the reports.

Error control is fixed before anything is scored: every task is gated at its alpha × its weight / the weights of the
tasks gated in the session summed (gate/alpha_split.py; all of its alpha under --gate-error-control=task), so a task's
verdict does not depend on where it ran (one process, an xdist worker, a shard) and the session's false-block rate is
bounded by the union of the tasks' (docs/baseline-gate.md, "Error rates"). The decision gathers the results and says
what the session as a whole gives; the pytest layer (gate/pytest_integration.py) and a merge of shards (run_record.py)
both report through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pytest_modelbench.gate.html_report import html_page
from pytest_modelbench.gate.report import GateResult, markdown, terminal_lines

EXIT_STATUS_FAIL_UNUSED = 1  # as syrupy


@dataclass
class SessionDecision:
    baseline_name: str
    score_only: bool = False
    results: list[GateResult] = field(default_factory=list)
    custom_tests: set[str] = field(default_factory=set)  # node ids of the tests run besides the task items
    unused: set[str] = field(default_factory=set)  # unused baselines (paths)
    deleted: list[str] = field(default_factory=list)  # unused baselines deleted under --snapshot-update
    display: Callable[[str], str] = str

    def outcomes_json(self) -> dict[str, dict[str, Any]]:
        """Each gated task's outcome for --results-json, by its '<suite>/<task>' key."""
        return {result.task: result.as_json() for result in self.results}

    def fails_on_unused(self, *, update: bool, warn_unused: bool) -> bool:
        return bool(self.unused) and not update and not warn_unused

    def terminal_section(self, *, baselines_missing: str | None = None, update: bool = False) -> tuple[str, list[str]]:
        """The summary's section title and lines (no lines: nothing to say)."""
        if self.score_only:
            if not self.results:
                return "", []
            return "modelbench gate: not run (--score-only)", [
                f"no gate ran: the scores of {len(self.results)} task(s) were compared with no baseline; "
                "they pass no release gate"
            ]
        lines: list[str] = []
        if self.results and baselines_missing:
            lines.append(baselines_missing)
        if self.results:
            lines += terminal_lines(self.results, custom_tests=len(self.custom_tests))
        lines += self._unused_lines(update)
        return f"modelbench gate (baseline '{self.baseline_name}')", lines

    def write_reports(self, *, md_report: Path | None, html_report: Path | None,
                      write: Callable[[str, Path, str], None]) -> None:
        """The markdown and HTML reports, through `write(option, path, text)`."""
        unused = [self.display(u) for u in sorted(self.unused)]
        if md_report is not None:
            write("--md-report", md_report, markdown(self.results, self.baseline_name, unused))
        if html_report is not None:
            write("--html-report", html_report, html_page(self.results, self.baseline_name, unused))

    def _unused_lines(self, update: bool) -> list[str]:
        if not self.unused:
            return []
        count = len(self.unused)
        noun = "baseline" if count == 1 else "baselines"
        if self.deleted:
            lines = [f"{count} unused {noun} deleted."]
            lines += [f"Deleted {Path(p).stem} ({self.display(p)})" for p in sorted(self.deleted)]
            return lines
        lines = [f"{count} {noun} unused."]
        lines += [f"Unused {Path(p).stem} ({self.display(p)})" for p in sorted(self.unused)]
        if not update:
            lines.append("Re-run pytest with --snapshot-update to delete unused baselines.")
        return lines
