"""The session's objects that plugin.py puts in `config.stash` and the other modules of this layer read."""

from __future__ import annotations

import pytest

from pytest_modelbench.pytest_plugin.results_gathering import GatheredResults
from pytest_modelbench.run.runner import BenchRunner
from pytest_modelbench.tasks.identity import TaskRegistry

RUNNER_KEY = pytest.StashKey[BenchRunner]()  # the session's runner: its options, its model, its evaluations
GATHERED_KEY = pytest.StashKey[GatheredResults]()  # every task scored in the session, wherever it ran
TASKS_KEY = pytest.StashKey[TaskRegistry]()  # the session's task files, by suite and task (tasks/identity.py)
WRITE_FAILURES_KEY = pytest.StashKey[list]()  # the run's files that could not be written (cli_options.py)
