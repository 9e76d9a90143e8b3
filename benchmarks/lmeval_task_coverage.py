"""How many of lm-eval 0.4.13's pure-YAML task files pytest-modelbench turns into task items, per output type, and
why it refuses the rest.

    python benchmarks/lmeval_task_coverage.py TASKS_DIR

TASKS_DIR is `lm_eval/tasks` from lm-eval's wheel (recipe in benchmarks/collect_lmeval_tasks.py). A task file is
pure YAML when its merged config (includes resolved) holds no `!function`: whether it loads then depends on this
engine alone, not on the task's Python code. Each one gets the checks collection runs on a task file
(`load_task_config` and `resolve_metrics`, as plugin.TaskFile does); files whose YAML cannot be read at all are
counted apart. The output type is lm-eval's reading of the file: generate_until when the key is absent. Refusals are
grouped as the terminal summary groups them (refusals.py).
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.metrics.registry import resolve_metrics
from pytest_modelbench.refusals import group_refusals
from pytest_modelbench.tasks.config import is_task_file, load_task_config
from pytest_modelbench.tasks.yaml_loader import FunctionRef, load_merged_yaml

LM_EVAL_DEFAULT_OUTPUT_TYPE = "generate_until"


def has_function(value: Any) -> bool:
    if isinstance(value, FunctionRef):
        return True
    if isinstance(value, dict):
        return any(has_function(item) for item in value.values())
    if isinstance(value, list):
        return any(has_function(item) for item in value)
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks_dir", type=Path, help="lm_eval/tasks from lm-eval 0.4.13's wheel")
    tasks_dir = parser.parse_args().tasks_dir.resolve()

    files = Counter()
    refusals: dict[str, list[tuple[Path, str]]] = defaultdict(list)
    with_code = unreadable = 0
    for path in sorted(tasks_dir.rglob("*.yaml")):
        if not is_task_file(path):
            continue
        try:
            raw = load_merged_yaml(path)
        except ModelbenchError:
            unreadable += 1
            continue
        if has_function(raw):
            with_code += 1
            continue
        output_type = raw.get("output_type", LM_EVAL_DEFAULT_OUTPUT_TYPE)
        files[output_type] += 1
        try:
            resolve_metrics(load_task_config(path))
        except ModelbenchError as exc:
            refusals[output_type].append((path, str(exc)))

    print(f"{tasks_dir}: {sum(files.values())} pure-YAML task files ({with_code} more use !function, "
          f"{unreadable} cannot be read)")
    for output_type, count in files.most_common():
        loaded = count - len(refusals[output_type])
        print(f"\n{output_type}: {count} pure-YAML files, {loaded} load ({100 * loaded / count:.1f}%)")
        for reason, paths in group_refusals(refusals[output_type]):
            print(f"  {len(paths):>6}  {reason}")


if __name__ == "__main__":
    main()
