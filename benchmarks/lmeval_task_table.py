"""Whether lm-eval 0.4.13's most-reported tasks and groups run here, as a markdown table (docs/suites.md).

    python benchmarks/lmeval_task_table.py TASKS_DIR [--allow-task-code]

TASKS_DIR is `lm_eval/tasks` from lm-eval's wheel (recipe in benchmarks/collect_lmeval_tasks.py). Each name is
looked up in the folder's index (tasks, groups and tags by name, as lm-eval finds them) and loaded as collection
loads it: a task file through `load_task_config` and `resolve_metrics`, a group file through `load_group` and
`gated_members` (plugin.TaskFile, plugin.GroupFile). A tag is a list of tasks, each loaded. The last column is the
command that runs it, or the error collection gives.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.metrics.group_scores import gated_members
from pytest_modelbench.metrics.task_metrics import resolve_metrics
from pytest_modelbench.tasks.config import load_task_config
from pytest_modelbench.tasks.groups import TaskIndex, load_group

# (where it is reported, name): the Open LLM Leaderboard v1 and v2, common model-card tables, bias.
POPULAR = (
    ("Leaderboard v1", "arc_challenge"), ("Leaderboard v1", "hellaswag"), ("Leaderboard v1", "truthfulqa_mc2"),
    ("Leaderboard v1", "mmlu"), ("Leaderboard v1", "winogrande"), ("Leaderboard v1", "gsm8k"),
    ("Leaderboard v1", "openllm"),
    ("Leaderboard v2", "leaderboard"), ("Leaderboard v2", "leaderboard_ifeval"), ("Leaderboard v2", "leaderboard_bbh"),
    ("Leaderboard v2", "leaderboard_math_hard"), ("Leaderboard v2", "leaderboard_gpqa"),
    ("Leaderboard v2", "leaderboard_musr"), ("Leaderboard v2", "leaderboard_mmlu_pro"),
    ("model cards", "arc_easy"), ("model cards", "piqa"), ("model cards", "boolq"), ("model cards", "openbookqa"),
    ("model cards", "sciq"), ("model cards", "lambada_openai"), ("model cards", "wikitext"),
    ("model cards", "truthfulqa_mc1"), ("model cards", "truthfulqa_gen"), ("model cards", "ifeval"),
    ("model cards", "bbh"), ("model cards", "mmlu_pro"), ("model cards", "minerva_math"), ("model cards", "drop"),
    ("model cards", "xnli"), ("model cards", "belebele"), ("model cards", "commonsense_qa"),
    ("model cards", "social_iqa"), ("model cards", "triviaqa"), ("model cards", "nq_open"),
    ("bias", "crows_pairs_english"), ("bias", "crows_pairs"), ("bias", "bbq"), ("bias", "winogender"),
    ("bias", "toxigen"),
)


def status(name: str, index: TaskIndex, allow_task_code: bool) -> tuple[str, str]:
    """(kind, outcome): what the name is, and 'runs' or the error that refuses it."""
    try:
        if name in index.groups:
            group = load_group(index.groups[name], [index.root], {index.root: index}, allow_task_code=allow_task_code)
            members = gated_members(group)
            kind = f"bundle of {len(members)}" if group.tree.config.is_bundle else "group"
            return f"{kind} ({len(group.leaf_tasks)} tasks)", "runs"
        paths = [index.tasks[name]] if name in index.tasks else [index.tasks[t] for t in index.tags.get(name, ())]
        if not paths:
            return "-", "not in lm-eval 0.4.13's tasks folder"
        for path in paths:
            resolve_metrics(load_task_config(path, allow_task_code=allow_task_code))
        return ("task" if name in index.tasks else f"tag ({len(paths)} tasks)"), "runs"
    except ModelbenchError as exc:
        return ("group" if name in index.groups else "task"), str(exc).replace(str(index.root) + "/", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks_dir", type=Path, help="lm_eval/tasks from lm-eval 0.4.13's wheel")
    parser.add_argument("--allow-task-code", action="store_true", help="load !function task code, as pytest does")
    args = parser.parse_args()
    index = TaskIndex.of(args.tasks_dir.resolve())
    flag = " --allow-task-code" if args.allow_task_code else ""
    print("| reported in | name | kind | collected as a gated item? |")
    print("|---|---|---|---|")
    for where, name in POPULAR:
        kind, outcome = status(name, index, args.allow_task_code)
        path = index.groups.get(name) or index.tasks.get(name)
        shown = f"`pytest --model=... --score-only{flag} TASKS/{path.relative_to(index.root)}`" if (
            outcome == "runs" and path is not None) else outcome
        print(f"| {where} | {name} | {kind} | {'yes: ' + shown if outcome == 'runs' else 'no: ' + outcome} |")


if __name__ == "__main__":
    main()
