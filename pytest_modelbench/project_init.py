"""`python -m pytest_modelbench init [SUITE ...]`: start gating in a project of one's own.

Writes into the current directory (or --dir): a copy of each chosen shipped suite under suites/ (the team's to edit:
margins, categories, weights), a pytest.ini that collects suites/, an empty baselines/ and the CI workflow. Copies,
not references to the installed package: a suite a team gates on is reviewed, customised and versioned with the
baselines recorded from it, and upgrading this package never changes it behind their back. Nothing that exists is
overwritten: every target is checked first, and one conflict writes nothing.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from importlib import metadata, resources
from importlib.resources.abc import Traversable
from pathlib import Path

from pytest_modelbench.errors import ModelbenchError

DEFAULT_SUITES = ("bias",)
WORKFLOW = Path(".github/workflows/model-gate.yml")
PYTEST_INI = """\
[pytest]
# pytest-modelbench: every task YAML under suites/ is one gated item; baselines are read from baselines/<name>/.
modelbench_suites = suites
"""
# Files of a shipped suite that are not the team's: caches Python leaves beside task code.
_SKIPPED = ("__pycache__",)


class InitRefused(ModelbenchError):
    """A target exists, a pytest configuration would be shadowed, or a suite name is unknown: nothing was written."""


@dataclass(frozen=True)
class PlannedFile:
    path: Path  # relative to the project
    text: str
    # A project file (pytest.ini, baselines/, the workflow) that exists is kept as it is, so that `init` adds a suite
    # to a project it set up before; a suite's file that exists refuses the whole init.
    kept_if_present: bool = False


@dataclass(frozen=True)
class InitResult:
    written: list[Path]
    kept: list[Path]
    advice: list[str]  # what the project still has to do by hand


def shipped_suites() -> dict[str, Traversable]:
    """The suites this package ships, by name (the folders of this repository's suites/)."""
    root = resources.files("pytest_modelbench.suites")
    return {entry.name: entry for entry in sorted(root.iterdir(), key=lambda e: e.name)
            if entry.is_dir() and entry.name not in _SKIPPED}


def plan(suites: list[str]) -> list[PlannedFile]:
    """Every file `init` writes for `suites` (relative paths and contents); refuses unknown suite names."""
    available = shipped_suites()
    unknown = [name for name in suites if name not in available]
    if unknown:
        raise InitRefused(f"no shipped suite named {', '.join(map(repr, unknown))}; the shipped suites are: "
                          f"{', '.join(available)}")
    files = [PlannedFile(Path("pytest.ini"), PYTEST_INI, kept_if_present=True),
             PlannedFile(Path("baselines/.gitkeep"), "", kept_if_present=True)]
    for name in dict.fromkeys(suites):
        files += [PlannedFile(Path("suites", name, *relative), text) for relative, text in _suite_files(available[name])]
    version = metadata.version("pytest-modelbench")
    workflow = (resources.files("pytest_modelbench") / "project_template" / "model-gate.yml").read_text("utf-8")
    files.append(PlannedFile(WORKFLOW, workflow.replace("@MODELBENCH_VERSION@", version), kept_if_present=True))
    return files


def _suite_files(folder: Traversable, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name in _SKIPPED or entry.name.endswith(".pyc"):
            continue
        if entry.is_dir():
            found += _suite_files(entry, prefix + (entry.name,))
        else:
            found.append((prefix + (entry.name,), entry.read_text("utf-8")))
    return found


def conflicts(project: Path, files: list[PlannedFile]) -> list[str]:
    """Why writing `files` into `project` would overwrite or shadow something; empty when it would not."""
    found = [f"{file.path} exists" for file in files if not file.kept_if_present and (project / file.path).exists()]
    if any(file.path == Path("pytest.ini") for file in files) and not (project / "pytest.ini").exists():
        found += [f"{name} configures pytest, and a new pytest.ini would take its place: add "
                  "`modelbench_suites = suites` to its pytest section, then run init again with --no-pytest-ini"
                  for name in _other_pytest_configurations(project)]
    return found


_PYTEST_TABLE = re.compile(r"^\s*\[tool\.pytest[.\]]", re.MULTILINE)


def _other_pytest_configurations(project: Path) -> list[str]:
    """The files besides pytest.ini in which pytest finds its configuration (pytest.ini, if written, wins over them)."""
    found = []
    pyproject = project / "pyproject.toml"
    if pyproject.is_file() and _PYTEST_TABLE.search(pyproject.read_text("utf-8", errors="replace")):
        found.append("pyproject.toml")
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read(project / name, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError) as exc:
            raise InitRefused(f"{project / name}: cannot be read as an ini file ({exc}); nothing was written") from None
        if parser.has_section(section):
            found.append(name)
    return found


def init_project(project: Path, suites: list[str], write_pytest_ini: bool = True) -> InitResult:
    """Write the files of `plan` into `project`, or none of them (InitRefused naming every conflict)."""
    files = [file for file in plan(suites) if write_pytest_ini or file.path != Path("pytest.ini")]
    found = conflicts(project, files)
    if found:
        raise InitRefused(f"{project.resolve()}: nothing was written, because " + "; ".join(found))
    written, kept = [], []
    for file in files:
        target = project / file.path
        if target.exists():
            kept.append(file.path)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file.text, encoding="utf-8")
        written.append(file.path)
    advice = []
    ini = project / "pytest.ini"
    if Path("pytest.ini") in kept and "modelbench_suites" not in ini.read_text("utf-8", errors="replace"):
        advice.append("pytest.ini exists and does not set modelbench_suites: add `modelbench_suites = suites` to "
                      "its [pytest] section, or the suites are not collected")
    task_code = sorted({file.path.parts[1] for file in files
                        if file.path.parts[0] == "suites" and _runs_task_code(file.text)})
    if task_code:
        advice.append(f"suite(s) {', '.join(task_code)} run Python task code: add --allow-task-code to the pytest "
                      f"command (and to PYTEST_ARGS in {WORKFLOW}) once you have read it")
    return InitResult(written, kept, advice)


def _runs_task_code(text: str) -> bool:
    """Whether a suite file refers to Python task code (a `!function` tag outside comments)."""
    return any("!function" in line.split("#", 1)[0] for line in text.splitlines())
