"""The pytest side of --shard K/N: keep one shard's items (run/sharding.py decides which).

plugin.py calls `keep_shard` from pytest_collection_modifyitems (trylast: after pytest's own -k/-m), once the gate
has weighed the whole session's gated items and the run record has noted the session (recording.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_modelbench.pytest_plugin.gate_hooks import GATE_KEY
from pytest_modelbench.run.sharding import Shard, ShardError, item_shards, parse_shard

SHARD_KEY = pytest.StashKey[Shard]()


def add_options(group: Any) -> None:
    group.addoption("--shard", default=None, metavar="K/N",
                    help="run shard K of N of the selected items, balanced by estimated cost (the same split on "
                    "every machine); alpha is still shared by the whole session's tasks")


def configure(config: pytest.Config) -> None:
    text = config.getoption("--shard")
    try:
        config.stash[SHARD_KEY] = parse_shard(text) if text is not None else Shard(1, 1)
    except ShardError as exc:
        raise pytest.UsageError(str(exc)) from None


def scored_tasks(item: pytest.Item) -> list[tuple[Path, str, Any]]:
    """(task file, config hash, config) of each task the item scores; none for a custom test."""
    if hasattr(item, "group"):
        return [(config.source.resolve(), config.config_hash, config) for _, config, _ in item.group.leaf_tasks]
    config = getattr(item, "task_config", None)
    return [] if config is None else [(config.source.resolve(), config.config_hash, config)]


def keep_shard(config: pytest.Config, items: list[pytest.Item], options: Any) -> None:
    """Deselect the items of the other shards. `options`: the run's RunOptions (data folder, --num-fewshot)."""
    shard = config.stash[SHARD_KEY]
    if shard.count == 1:
        return
    config.stash[GATE_KEY].decision.pooled_by_merge = True  # a suite's tasks may run on several shards
    shards = item_shards([(item.nodeid, scored_tasks(item)) for item in items], shard.count, options.data_dir,
                         options.num_fewshot)
    dropped = [item for item in items if shards[item.nodeid] != shard.index]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if shards[item.nodeid] == shard.index]
