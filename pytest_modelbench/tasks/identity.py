"""What identifies a task in a run: its suite and its name.

The suite is the folder of the task's YAML, relative to the `modelbench_suites` folder that holds it (a YAML
directly in a configured folder, or in a folder outside them named on the command line: that folder's name). The
task's key, `<suite>/<task>`, names its row in the summaries and the results JSON; its baseline is
`<baselines>/<name>/<suite>/<file stem>.json`. Two task files whose baselines would share one file are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pytest_modelbench.errors import DuplicateTaskError


@dataclass(frozen=True)
class TaskId:
    suite: str
    task: str

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.task}"

    @property
    def file_stem(self) -> str:
        """The stem of the task's baseline file: its name, with what a file name cannot hold replaced."""
        return safe_file_stem(self.task)


def safe_file_stem(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", task).lstrip(".") or "_"


def suite_of(folder: Path, suite_roots: Iterable[Path]) -> str:
    """The suite of the task YAMLs in `folder`; `suite_roots`: the `modelbench_suites` folders."""
    folder = Path(folder).resolve()
    for root in sorted((Path(r).resolve() for r in suite_roots), key=lambda r: -len(r.parts)):  # innermost first
        if folder == root:
            return root.name
        if root in folder.parents:
            return folder.relative_to(root).as_posix()
    return folder.name


def suites_under(suite_roots: Iterable[Path]) -> set[str]:
    """Every suite that the `modelbench_suites` folders hold a YAML of."""
    roots = [Path(r) for r in suite_roots]
    return {suite_of(path.parent, roots) for root in roots if root.is_dir() for path in root.rglob("*.yaml")}


def identify(yaml_path: Path, task: str, suite_roots: Iterable[Path]) -> TaskId:
    return TaskId(suite_of(Path(yaml_path).parent, suite_roots), task)


class TaskRegistry:
    """The task files collected in a session, by the baseline file each one maps to."""

    def __init__(self) -> None:
        self._files: dict[tuple[str, str], tuple[TaskId, Path]] = {}  # (suite, file stem) -> the first file

    def add(self, identity: TaskId, yaml_path: Path) -> None:
        """Raises DuplicateTaskError when another file's task maps to the same baseline file."""
        slot = (identity.suite, identity.file_stem)
        other_identity, other_path = self._files.setdefault(slot, (identity, yaml_path))
        if Path(other_path).resolve() == Path(yaml_path).resolve():
            return
        if other_identity.task == identity.task:
            clash = (f"task '{identity.task}' is also defined in {other_path}: both would be gated against one "
                     f"baseline file ({identity.suite}/{identity.file_stem}.json in suite '{identity.suite}') and "
                     "reported as one row")
        else:
            clash = (f"task '{identity.task}' and task '{other_identity.task}' in {other_path} would be gated against "
                     f"one baseline file ({identity.suite}/{identity.file_stem}.json in suite '{identity.suite}'; "
                     "file names keep letters, digits, '.', '_' and '-' only)")
        raise DuplicateTaskError(f"{yaml_path}: {clash}; rename one (key 'task') or move it to another suite folder")
