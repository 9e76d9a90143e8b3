"""docs/architecture.md names real code, and the README stays a front page.

Every backticked dotted name in the architecture page that starts with one of the package's layer packages
(`tasks.config.load_task_config`, `gate.judging.judge_task`, ...) must resolve to a module, class or function of
pytest_modelbench, so the page cannot drift from the code it walks through.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYER_PACKAGES = ("tasks", "scoring", "metrics", "gate", "run", "outputs", "pytest_plugin")
CODE_NAME = re.compile(r"`((?:%s)(?:\.[A-Za-z_]\w*)+)(?:\(\))?`" % "|".join(LAYER_PACKAGES))


def resolves(dotted: str) -> bool:
    parts = f"pytest_modelbench.{dotted}".split(".")
    for split in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_the_architecture_page_names_only_code_that_exists():
    names = sorted(set(CODE_NAME.findall((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))))
    assert len(names) >= 25, f"the page walks through too little code to check: {names}"
    assert [name for name in names if not resolves(name)] == []


def test_the_check_rejects_a_name_that_does_not_exist():
    assert resolves("gate")
    assert not resolves("gate.no_such_module_or_function")


def test_the_readme_is_a_front_page():
    assert len((REPO / "README.md").read_bytes()) < 12 * 1024
