"""The gate core (pytest_modelbench/gate) imports without torch, transformers, pytest or syrupy: it is plain Python and
numpy, testable and usable without the scorers or the pytest layer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# In a fresh interpreter: refuse the four packages, then import every module under pytest_modelbench/gate.
PROBE = """
import importlib, pkgutil, sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "transformers", "pytest", "_pytest", "syrupy"}:
            raise ImportError("refused " + name)

sys.meta_path.insert(0, Refuse())
import pytest_modelbench.gate as gate
failed = []
for module in pkgutil.walk_packages(gate.__path__, "pytest_modelbench.gate."):
    try:
        importlib.import_module(module.name)
    except ImportError as exc:
        failed.append(f"{module.name}: {exc}")
print("\\n".join(failed))
"""


def test_every_gate_module_imports_without_torch_transformers_pytest_or_syrupy():
    completed = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120,
                               env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == ""
