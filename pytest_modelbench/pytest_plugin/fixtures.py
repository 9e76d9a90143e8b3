"""Fixtures for a team's own tests beside its suites (registered by plugin.py; docs/suites.md, "Custom tests").

`modelbench_model` (session scope) shares the session's BenchRunner with the task items: the model is loaded once,
scores go through the same score cache, and `--model`, `--dtype`, `--batch-size`, `--limit`, `--data-dir` apply.
A test that uses it is skipped when no `--model` was given, as the task items are.

    def test_prefers_the_grammatical_sentence(modelbench_model):
        good, bad = modelbench_model.loglikelihood([("", "The cats sleep."), ("", "The cats sleeps.")])
        assert good > bad

    def test_crows_pairs_scores(modelbench_model):
        evaluation = modelbench_model.evaluate("crows_pairs_english")   # or a path to a task YAML
        assert 0 <= evaluation.scores.overall["pct_stereotype"].value <= 1
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pytest

from pytest_modelbench.errors import ModelbenchError, TaskConfigError
from pytest_modelbench.run.evaluation import TaskEvaluation, checked_results
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.pytest_plugin.stash_keys import RUNNER_KEY, TASKS_KEY
from pytest_modelbench.run.runner import BenchRunner
from pytest_modelbench.scoring.loading import DEFAULT_MODEL
from pytest_modelbench.tasks.config import TaskConfig, is_task_file, load_task_config
from pytest_modelbench.tasks.identity import TaskRegistry, identify
from pytest_modelbench.tasks.yaml_loader import load_merged_yaml

_YAML_SUFFIXES = (".yaml", ".yml")


class ModelbenchModel:
    """The session's model for custom tests: score requests, or evaluate a task as its item would."""

    def __init__(self, runner: BenchRunner, config: pytest.Config):
        self._runner = runner
        self._config = config

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        """Summed log-likelihood of each (context, continuation), by lm-eval's rules (docs/scoring.md)."""
        backend = self._runner.backend()  # the session's: model loaded (or servers reached) once, the score cache
        requests = list(requests)
        return checked_results(backend, backend.loglikelihood(requests), len(requests), "log-likelihood",
                               "modelbench_model.loglikelihood")

    def evaluate(self, task: str | os.PathLike) -> TaskEvaluation:
        """A task YAML's evaluation (scores per metric, overall and per category; per-document log-likelihoods).

        `task`: a path to a task YAML (relative paths from the rootdir), or a task name found in the
        `modelbench_suites` folders (in one suite only). A task this session already scored is not scored again.
        """
        config = self._task_config(task)
        identity = identify(config.source, config.task, self._config.getini("modelbench_suites"))
        # Refuses another file of the same suite and name as a task of this session: its row would replace that one.
        self._config.stash.setdefault(TASKS_KEY, TaskRegistry()).add(identity, config.source)
        return self._runner.evaluate(config, identity)

    def _task_config(self, task: str | os.PathLike) -> TaskConfig:
        allow_code = self._config.getoption("--allow-task-code")
        path = self._config.rootpath / task
        if path.suffix not in _YAML_SUFFIXES:
            path = self._find(str(task))
        config = load_task_config(path, allow_task_code=allow_code)
        resolve_metrics(config)
        return config

    def _find(self, name: str) -> Path:
        folders = [Path(p) for p in self._config.getini("modelbench_suites")]
        found = sorted({
            path for folder in folders for path in folder.rglob("*")
            if path.suffix in _YAML_SUFFIXES and is_task_file(path) and _task_name(path) == name
        })
        if len(found) == 1:
            return found[0]
        if found:
            where = ", ".join(f"{identify(path, name, folders).key} ({path})" for path in found)
            raise TaskConfigError(
                f"modelbench_model.evaluate: task name {name!r} is defined by {len(found)} task files: {where}; "
                "pass the path of its task YAML"
            )
        shown = ", ".join(str(f) for f in folders) or "none"
        raise TaskConfigError(
            f"modelbench_model.evaluate: no task named {name!r} in the modelbench_suites folders ({shown}); "
            "pass a task name from those folders or a path to a task YAML"
        )


def _task_name(path: Path) -> str | None:
    try:
        return load_merged_yaml(path).get("task")
    except ModelbenchError:
        return None


@pytest.fixture(scope="session")
def modelbench_model(pytestconfig: pytest.Config) -> ModelbenchModel:
    runner = pytestconfig.stash[RUNNER_KEY]
    if runner.options.model is None:
        pytest.skip(f"modelbench_model: no --model given (try --model={DEFAULT_MODEL})")
    return ModelbenchModel(runner, pytestconfig)
