"""One summary row per task config: what `--list-tasks` shows."""

from __future__ import annotations

from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.groups import GroupTree
from pytest_modelbench.tasks.task import effective_num_fewshot

LISTING_HEADER = ("task", "tag", "dataset", "split", "metrics", "few-shot", "baseline")


def task_row(key: str, config: TaskConfig, num_fewshot: int | None, has_baseline: bool) -> tuple[str, ...]:
    """`key`: the task's '<suite>/<task>' (tasks/identity.py); `num_fewshot`: the --num-fewshot override, applied
    by lm-eval's rule as when scoring."""
    dataset = "/".join(part for part in (config.dataset_path, config.dataset_name) if part) or "-"
    return (
        key,
        ", ".join(config.tag) or "-",
        dataset,
        config.eval_split or "-",
        ", ".join(spec.name for spec in config.metric_list),
        fewshot_setting(config, num_fewshot),
        "yes" if has_baseline else "no",
    )


def fewshot_setting(config: TaskConfig, num_fewshot: int | None) -> str:
    shots = effective_num_fewshot(config, num_fewshot)
    if not shots:
        return "0"
    pool = "fewshot_config.samples" if config.fewshot_pool_split is None else f"'{config.fewshot_pool_split}'"
    return f"{shots} from {pool} ({config.fewshot_sampler})"


def group_row(key: str, tree: GroupTree, has_baseline: bool) -> tuple[str, ...]:
    """A group's row: its tasks and subgroups counted where a task shows its dataset and split."""
    tasks, subgroups = len(tree.leaves()), len(tree.subgroups())
    return (
        key,
        "-",
        f"group: {tasks} task(s)" + (f", {subgroups} subgroup(s)" if subgroups else ""),
        "-",
        ", ".join(spec.metric for spec in tree.config.aggregate_metrics),
        "as its tasks",
        "yes" if has_baseline else "no",
    )
