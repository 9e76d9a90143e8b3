"""The engine's layers import downwards only (issue 38): the task engine (tasks/) reads YAML into configs, documents
and requests without the scoring or metrics layers, scoring needs no metrics, and none of them reaches the gate,
the run pipeline or the pytest layer. Function-level imports count: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_modelbench
from pytest_modelbench.numeric import is_number

PACKAGE = Path(pytest_modelbench.__file__).parent
FOUNDATION = {"errors", "atomic_files", "numeric"}
# Each engine package and what it may import besides itself and the foundation.
ALLOWED = {"tasks": set(), "scoring": {"tasks"}, "metrics": {"tasks", "scoring"}}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("pytest_modelbench.")}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_an_engine_layer_imports_only_itself_lower_layers_and_the_foundation(layer):
    allowed = {layer} | ALLOWED[layer] | FOUNDATION
    upward = sorted(
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in (PACKAGE / layer).rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[1] not in allowed
    )
    assert upward == []


def test_is_number_is_a_real_number_and_a_bool_only_where_it_counts():
    import numpy as np

    assert all(is_number(v) for v in (1, -2.5, float("nan"), np.float32(0.5), np.int64(3)))
    assert not any(is_number(v) for v in (True, np.bool_(True), "1", None, [1.0], 1 + 0j))
    assert is_number(True, bool_counts=True) and is_number(False, bool_counts=True)
    assert not is_number(np.bool_(True), bool_counts=True)  # numpy's bool is not a numbers.Real
