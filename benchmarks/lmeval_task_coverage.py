"""How many of lm-eval 0.4.13's pure-YAML task files pytest-modelbench turns into task items, per output type, and
why it refuses the rest.

    python benchmarks/lmeval_task_coverage.py TASKS_DIR [--allow-task-code]

TASKS_DIR is `lm_eval/tasks` from lm-eval's wheel (recipe in benchmarks/collect_lmeval_tasks.py). A task file is
pure YAML when its merged config (includes resolved) holds no `!function`: whether it loads then depends on this
engine alone, not on the task's Python code. Each one gets the checks collection runs on a task file
(`load_task_config` and `resolve_metrics`, as plugin.TaskFile does); files whose YAML cannot be read at all are
counted apart. Group files (a `group` key) are counted on a line of their own: each is resolved by name over the
whole folder (lm-eval's index) and its aggregates checked, as collection does (plugin.GroupFile; with task code
only when --allow-task-code is given). The output type is lm-eval's reading of the file: generate_until when the key is absent. Refusals are
grouped as the terminal summary groups them (pytest_plugin/refusals.py). With --allow-task-code every task file is counted, its
`!function` code loaded as `pytest --allow-task-code` loads it (lm-eval itself is not installed here, so code that
imports it is refused naming the lmeval-task-code extra).
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.metrics.group_scores import gated_members
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.pytest_plugin.refusals import group_refusals
from pytest_modelbench.tasks.config import is_task_file, load_task_config
from pytest_modelbench.tasks.groups import TaskIndex, is_group_file, load_group
from pytest_modelbench.tasks.yaml_loader import FunctionRef, load_merged_yaml

LM_EVAL_DEFAULT_OUTPUT_TYPE = "generate_until"
GROUP = "group files"  # counted beside the output types: each one is a gated item of its own


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
    parser.add_argument("--allow-task-code", action="store_true", help="count task files with !function code too")
    args = parser.parse_args()
    tasks_dir, allow_task_code = args.tasks_dir.resolve(), args.allow_task_code

    files = Counter()
    refusals: dict[str, list[tuple[Path, str]]] = defaultdict(list)
    with_code = unreadable = 0
    indexes: dict[Path, TaskIndex] = {}
    for path in sorted(tasks_dir.rglob("*.yaml")):
        if is_group_file(path):
            files[GROUP] += 1
            try:
                group = load_group(path, [tasks_dir], indexes, allow_task_code=allow_task_code)
                gated_members(group)
            except ModelbenchError as exc:
                refusals[GROUP].append((path, str(exc)))
            continue
        if not is_task_file(path):
            continue
        try:
            raw = load_merged_yaml(path)
        except ModelbenchError:
            unreadable += 1
            continue
        if has_function(raw) and not allow_task_code:
            with_code += 1
            continue
        output_type = raw.get("output_type", LM_EVAL_DEFAULT_OUTPUT_TYPE)
        files[output_type] += 1
        try:
            resolve_metrics(load_task_config(path, allow_task_code=allow_task_code))
        except ModelbenchError as exc:
            refusals[output_type].append((path, str(exc)))

    kind = "task files (task code allowed)" if allow_task_code else "pure-YAML task files"
    tasks = sum(count for output_type, count in files.items() if output_type != GROUP)
    print(f"{tasks_dir}: {tasks} {kind} and {files[GROUP]} group files ({with_code} more use !function, {unreadable} "
          "cannot be read)")
    for output_type, count in files.most_common():
        loaded = count - len(refusals[output_type])
        print(f"\n{output_type}: {count} files, {loaded} load ({100 * loaded / count:.1f}%)")
        for reason, paths in group_refusals(refusals[output_type]):
            print(f"  {len(paths):>6}  {reason}")


if __name__ == "__main__":
    main()
