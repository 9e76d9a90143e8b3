"""The package's layers (docs/architecture.md): lower layers never import upper ones, no module imports itself back
through others, and the gate core imports without torch, transformers, pytest or syrupy.

The import graph is read from the source with `ast`, imports inside functions included: a lazy import that dodges a
circle at import time is still a circle in the design.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "pytest_modelbench"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE

# Lowest first; a module may import its own layer and any layer before it.
LAYERS = (
    ("foundation", ("pytest_modelbench", "pytest_modelbench.errors", "pytest_modelbench.atomic_files",
                    "pytest_modelbench.numeric", "pytest_modelbench.text_format")),
    ("task engine", ("pytest_modelbench.tasks",)),
    ("scoring", ("pytest_modelbench.scoring",)),
    ("metrics", ("pytest_modelbench.metrics",)),
    ("gate core", ("pytest_modelbench.gate",)),
    ("run", ("pytest_modelbench.run",)),
    ("outputs", ("pytest_modelbench.outputs",)),
    ("pytest layer", ("pytest_modelbench.pytest_plugin", "pytest_modelbench.__main__", "pytest_modelbench.project_init")),
)
FOUNDATION_MODULES = LAYERS[0][1]


def module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the package's modules it imports (anywhere in its source)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            imported.update(c for c in candidates if c in modules and c != name)
        graph[name] = imported
    return graph


def layer_of(module: str) -> int:
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix not in FOUNDATION_MODULES and module.startswith(prefix + ".")):
                return rank
    raise LookupError(f"{module} belongs to no layer: add it to a layer's package or to LAYERS")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                  for module, targets in graph.items() for target in targets
                  if layer_of(target) > layer_of(module))


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_every_module_belongs_to_a_layer():
    unplaced = []
    for module in module_names():
        try:
            layer_of(module)
        except LookupError as exc:
            unplaced.append(str(exc))
    assert not unplaced, "\n".join(unplaced)


def test_no_lower_layer_imports_an_upper_one():
    assert upward_imports(import_graph(module_names())) == []


def test_no_import_circles():
    assert import_circles(import_graph(module_names())) == []


def test_the_checks_catch_an_upward_import_and_a_circle():
    graph = {"pytest_modelbench.gate.judging": {"pytest_modelbench.outputs.terminal"},
             "pytest_modelbench.outputs.terminal": {"pytest_modelbench.gate.judging"},
             "pytest_modelbench.tasks.config": set()}
    assert upward_imports(graph) == ["pytest_modelbench.gate.judging (gate core) imports "
                                     "pytest_modelbench.outputs.terminal (outputs)"]
    assert import_circles(graph) == [["pytest_modelbench.gate.judging", "pytest_modelbench.outputs.terminal"]]


BLOCKED = ("torch", "transformers", "pytest", "_pytest", "syrupy", "pluggy")
IMPORT_WITHOUT = f"""
import importlib, sys
BLOCKED = {BLOCKED!r}
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked: {{name}}")
sys.meta_path.insert(0, Blocker())
for name in sys.argv[1:]:
    importlib.import_module(name)
print("imported", len(sys.argv) - 1)
"""


def test_the_gate_core_imports_without_torch_transformers_or_pytest():
    gate = sorted(m for m in module_names() if m.startswith("pytest_modelbench.gate."))
    done = subprocess.run([sys.executable, "-c", IMPORT_WITHOUT, *gate], capture_output=True, text=True,
                          cwd=PACKAGE_DIR.parent, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"imported {len(gate)}"


@pytest.mark.parametrize("blocked", ["torch", "pytest"])
def test_the_blocker_does_block(blocked):
    done = subprocess.run([sys.executable, "-c", IMPORT_WITHOUT, blocked], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and f"blocked: {blocked}" in done.stderr


def test_a_module_over_400_lines_says_why_at_its_top():
    long = sorted(f"{name} ({len(lines)} lines)" for name, path in module_names().items()
                  if len(lines := path.read_text(encoding="utf-8").splitlines()) > 400
                  and not lines[0].startswith("# Over 400 lines: "))
    assert long == []
