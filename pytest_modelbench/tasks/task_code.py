"""A task's own Python code: `!function module.name` in a task YAML, loaded from the suite folder (only with
--allow-task-code) and called so that whatever goes wrong inside it is an error naming it, never a traceback."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pytest_modelbench.errors import TaskCodeError, TaskConfigError
from pytest_modelbench.tasks.yaml_loader import FunctionRef

# How a task's YAML turns a `!function` into its code (tasks/config.py builds one per file): (key, value) → the
# resolved function, or the value as it is when it is not a `!function`.
Resolve = Callable[[str, Any], Any]


@dataclass(frozen=True)
class TaskFunction:
    """A resolved `!function`: calls the task's own code; an exception inside it becomes a TaskCodeError naming it."""

    dotted_name: str
    function: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.function(*args, **kwargs)
        except TaskCodeError as exc:  # a use the engine refuses (metrics/process_results.py NOT_COMPUTED)
            raise TaskCodeError(f"!function {self.dotted_name}: {exc}") from None
        except Exception as exc:  # user code: reported with its name, never as a traceback
            missing = lm_eval_missing(exc)
            if missing:
                raise TaskCodeError(f"!function {self.dotted_name}: {missing}") from None
            raise TaskCodeError(f"!function {self.dotted_name} raised {type(exc).__name__}: {exc}") from None


LMEVAL_EXTRA = "pip install 'pytest-modelbench[lmeval-task-code]'"


def lm_eval_missing(exc: BaseException) -> str | None:
    """The message for task code that imports lm-eval's own modules (IFEval's instruction registry, for one) when
    lm-eval is not installed; None for any other failure."""
    if not isinstance(exc, ModuleNotFoundError) or not (exc.name or "").split(".")[0] == "lm_eval":
        return None
    return (f"it imports module '{exc.name}', which is part of lm-eval; install it with {LMEVAL_EXTRA} "
            "(lm-eval 0.4.13, the version whose tasks this plugin follows)")


def resolve_function(ref: FunctionRef, path: Path, key: str, allow_task_code: bool) -> TaskFunction:
    """The task code a `!function` names, loaded from the suite folder; refused without --allow-task-code."""
    where = f"{path}: key '{key}'"
    if ref.yaml_file.resolve() != Path(path).resolve():  # written in a group's entry for the task, or an include
        where += f" (written in {ref.yaml_file})"
    if not allow_task_code:
        raise TaskConfigError(
            f"{where} uses '!function {ref.dotted_name}', which runs Python code from the suite "
            "folder; pass --allow-task-code to allow it"
        )
    module_name, _, attr = ref.dotted_name.rpartition(".")
    module_file = ref.yaml_dir / (module_name.replace(".", "/") + ".py")
    if not module_file.is_file():
        raise TaskConfigError(f"{where}: module file {module_file} not found")
    spec = importlib.util.spec_from_file_location(f"modelbench_task_code.{module_name}", module_file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        function = getattr(module, attr)
    except (Exception, SystemExit) as exc:  # user code: any failure (an exit at import too) is reported
        problem = lm_eval_missing(exc) or exc
        if isinstance(exc, ImportError) and problem is exc:
            problem = (f"{exc} (for a task of lm-eval's tasks folder, {LMEVAL_EXTRA} installs lm-eval's task "
                       "dependencies)")
        raise TaskConfigError(f"{where}: cannot load {ref.dotted_name}: {problem}") from None
    if not callable(function):
        raise TaskConfigError(f"{where}: {ref.dotted_name} is not a function")
    return TaskFunction(ref.dotted_name, function)
