"""Every task scored in the session, gathered where the session reports (the xdist controller, or the one process).

Each test report carries the evaluations made during its test (task items and custom tests alike) as JSON text in
an extra report attribute, which pytest-xdist sends to the controller with the report. The controller rebuilds them
in `pytest_runtest_logreport`; without xdist the same path runs in one process. The scores table and --results-json
(plugin.py) are built from what is gathered here, so a worker's tasks cannot go missing from either.
"""

from __future__ import annotations

import json
from itertools import islice
from typing import Any

import pytest

from pytest_modelbench.outputs.results import task_results
from pytest_modelbench.run.runner import BenchRunner

REPORT_ATTRIBUTE = "modelbench_task_results"


class GatheredResults:
    """Registered as a plugin by plugin.py (pytest_configure)."""

    def __init__(self, runner: BenchRunner, log_samples: bool):
        self.runner = runner
        self.log_samples = log_samples
        self._reported = 0  # how many of this process's evaluations (runner.evaluations, in order) went into a report
        self._gathered: dict[str, dict[str, Any]] = {}  # '<suite>/<task>' -> its task_results, from the reports

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        report = yield
        evaluations = self.runner.evaluations
        # New tasks are appended to the dict; a task scored again keeps its place and its first report stands
        # (the same task on the same model). Only the tail is read: a run of thousands of tasks stays linear.
        new = list(islice(reversed(evaluations.items()), len(evaluations) - self._reported))[::-1]
        if new:
            self._reported = len(evaluations)
            setattr(report, REPORT_ATTRIBUTE, json.dumps(
                [task_results(identity, evaluation, self.log_samples) for identity, evaluation in new]
            ))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        text = getattr(report, REPORT_ATTRIBUTE, None)
        if text:
            for results in json.loads(text):
                self._gathered[results["key"]] = results

    def tasks(self) -> list[dict[str, Any]]:
        """Each task's results, by '<suite>/<task>' key (the same order whichever worker scored which task)."""
        return [self._gathered[task] for task in sorted(self._gathered)]
