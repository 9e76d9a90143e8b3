"""`--show-prompts` and `--list-tasks`: look at the collected tasks instead of scoring them, without a model.

plugin.py makes two calls: `add_options` (pytest_addoption) and `configure` (pytest_configure). When either option is
given, `TaskInspection` takes over pytest's run loop after collection: nothing is scored, and the run fails when a
task cannot render its prompts. Collection errors (a broken YAML) are reported by pytest as usual, before this.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.pytest_plugin.gate_hooks import GATE_KEY
from pytest_modelbench.text_format import format_table
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.listing import LISTING_HEADER, group_row, task_row
from pytest_modelbench.tasks.preview import preview_lines
from pytest_modelbench.tasks.task import prepare_task

PREVIEW_DOCUMENTS = 3  # documents per task shown by --show-prompts without --limit


def add_options(group: Any) -> None:
    group.addoption("--show-prompts", action="store_true",
                    help=f"show the first documents of each task (--limit N, default {PREVIEW_DOCUMENTS}) as the model "
                    "would see them, without loading a model; fails on a task that cannot render")
    group.addoption("--list-tasks", action="store_true",
                    help="list the collected tasks (tag, dataset, split, metrics, few-shot, baseline) without scoring")


def configure(config: pytest.Config, options: Any) -> None:
    """`options`: the run's RunOptions (data folder, --limit, --num-fewshot)."""
    if config.getoption("--show-prompts") or config.getoption("--list-tasks"):
        if getattr(config.option, "numprocesses", None):  # pytest-xdist's controller collects nothing to show
            raise pytest.UsageError("--show-prompts and --list-tasks run in one process: leave out -n")
        config.pluginmanager.register(TaskInspection(config, options), "modelbench-inspection")


class TaskInspection:
    def __init__(self, config: pytest.Config, options: Any):
        self.config = config
        self.options = options

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        option = self.config.option
        if option.collectonly or (session.testsfailed and not option.continue_on_collection_errors):
            return None  # pytest's own loop reports the collection errors and stops
        items = [item for item in session.items if hasattr(item, "task_config")]
        groups = [item for item in session.items if hasattr(item, "group")]
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if option.list_tasks:
            self._list(items, groups, reporter)
        if option.show_prompts:
            session.testsfailed += self._preview([item.task_config for item in items], reporter)
        return True

    def _list(self, items: list[Any], groups: list[Any], reporter: Any) -> None:
        """`items`, `groups`: the task and group items collected (plugin.py, TaskItem and GroupItem)."""
        gate = self.config.stash[GATE_KEY]
        store = gate.store
        reporter.section(f"modelbench tasks (baseline '{gate.baseline_name}' in {store.display(store.name_dir)})")
        rows = [
            task_row(item.task_id.key, item.task_config, self.options.num_fewshot,
                     store.path(item.task_id).is_file())
            for item in items
        ]
        rows += [group_row(item.task_id.key, item.group.tree, store.path(item.task_id).is_file())
                 for item in groups]
        for line in format_table(LISTING_HEADER, rows):
            reporter.write_line(line)

    def _preview(self, configs: list[TaskConfig], reporter: Any) -> int:
        """Write each task's preview; returns the number of tasks that cannot render."""
        reporter.section("modelbench prompt preview")
        failed = 0
        for config in configs:
            try:
                prepared = prepare_task(
                    config, data_dir=self.options.data_dir, num_fewshot=self.options.num_fewshot,
                    limit=self.options.limit or PREVIEW_DOCUMENTS,
                )
            except ModelbenchError as exc:
                failed += 1
                reporter.write_line(f"FAILED {config.task}: {type(exc).__name__}: {exc}", red=True, bold=True)
                continue
            for line in preview_lines(prepared):
                reporter.write_line(line)
        if failed:
            reporter.write_line(f"{failed} of {len(configs)} tasks cannot render their prompts", red=True, bold=True)
        return failed
