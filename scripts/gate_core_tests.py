"""Print the test modules of tests/unit that run without a model: of this package they import the gate core and the
layers it is built on (task engine, metrics, run, outputs), never scoring or the pytest layer (torch, transformers,
syrupy); of third-party packages only GATE_CORE_PACKAGES (their own imports and those of the tests/fixtures modules
they use, imports inside functions included); and their tests take no fixture that loads a model or runs pytest in
pytest.

scripts/test-gate-core-pythons.sh runs them on every supported Python, with only those packages installed.
    python scripts/gate_core_tests.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GATE_CORE_PACKAGES = {"numpy", "yaml", "jinja2", "jsonschema", "sacrebleu", "pytest", "_pytest", "hypothesis"}
# tests/conftest.py's fixtures that load models or data, and pytest's own that runs the plugin
HEAVY_FIXTURES = {"tiny_model", "tiny_bos_model", "tiny_loaded", "default_model", "shared_data", "pytester",
                  "testdir", "data_mirror"}


def module_path(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imports_of(path: Path, name: str) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


# Scoring and the pytest layer import torch, transformers and syrupy; prepare_task loads documents with datasets.
MODEL_LAYERS = ("pytest_modelbench.scoring", "pytest_modelbench.pytest_plugin", "pytest_modelbench.__main__",
                "pytest_modelbench.tasks.task.prepare_task", "pytest_modelbench.tasks.datasets")
# Modules whose need is not in their imports
WHOLE_PACKAGE = {
    "test_architecture_doc.py": "imports every module the architecture page names",
    "test_filters.py": "checks generation settings against transformers' GenerationConfig",
}


def outside_gate_core(name: str, seen: set[str]) -> set[str]:
    """What a test module (or a tests/fixtures module it uses, transitively) imports that needs a model."""
    if name in seen:
        return set()
    seen.add(name)
    beyond: set[str] = set()
    for imported in imports_of(module_path(name), name):
        root = imported.split(".")[0]
        if root == "tests":
            if module_path(imported) is not None:
                beyond |= outside_gate_core(imported, seen)
        elif root == "pytest_modelbench":
            if imported.startswith(MODEL_LAYERS):
                beyond.add(imported)
        elif root not in sys.stdlib_module_names and root != "__future__" and root not in GATE_CORE_PACKAGES:
            beyond.add(root)
    return beyond


def takes_heavy_fixture(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if {arg.arg for arg in node.args.args} & HEAVY_FIXTURES:
                return True
    return False


def gate_core_test_modules() -> list[Path]:
    selected = []
    for path in sorted((REPO / "tests" / "unit").glob("test_*.py")):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if path.name not in WHOLE_PACKAGE and not outside_gate_core(name, set()) and not takes_heavy_fixture(path):
            selected.append(path)
    return selected


if __name__ == "__main__":
    for path in gate_core_test_modules():
        print(path.relative_to(REPO))
