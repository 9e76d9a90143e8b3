"""--shard K/N: which of the session's items one shard runs, balanced by estimated cost, the same on every machine.

The items are first joined into units that must run together: tasks scored once for several items (a task and a
group holding it, two groups sharing a task) share a unit, so no task is scored on two shards. Each unit's cost is
estimated without loading anything: the bytes of its tasks' evaluation split (the data mirror's file, or the
YAML's local data_files) times one plus the few-shot count; a task whose data is not a local file costs the mean of
those that are. The units are then dealt largest first, each to the shard with the least cost so far (ties to the
lowest shard, units ordered by cost, then name), which depends only on what was collected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Iterable, Mapping, Sequence

from pytest_modelbench.errors import ModelbenchError
from pytest_modelbench.tasks.datasets import mirror_files, resolved_data_files


MAX_SHARDS = 10_000  # far more machines than any session's items; a larger N is a typo


class ShardError(ModelbenchError):
    """A --shard value that is not K/N with 1 ≤ K ≤ N ≤ MAX_SHARDS."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match or not 1 <= int(match[1]) <= int(match[2]) <= MAX_SHARDS:
        raise ShardError(f"--shard must be K/N with 1 <= K <= N <= {MAX_SHARDS:,} (shard K of N), got {text!r}")
    return Shard(int(match[1]), int(match[2]))


@dataclass(frozen=True)
class Unit:
    """Items that run on one shard: their names and the tasks (by scoring key) they score."""

    names: tuple[str, ...]
    cost: float


def join_units(items: Sequence[tuple[str, Iterable[Hashable]]], costs: Mapping[Hashable, float | None]) -> list[Unit]:
    """`items`: (name, the keys of the tasks it scores) in collection order; `costs`: each task key's estimated
    cost, None when unknown. Items sharing a task key form one unit."""
    parent: dict[Hashable, Hashable] = {}

    def root(key: Hashable) -> Hashable:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    keyed = []
    for name, keys in items:
        keys = list(keys) or [("item", name)]  # an item that scores no task (a custom test) is a unit of its own
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
        keyed.append((name, keys))
    known = [c for c in costs.values() if c is not None]
    unknown_cost = sum(known) / len(known) if known else 1.0
    names: dict[Hashable, list[str]] = {}
    tasks: dict[Hashable, set[Hashable]] = {}
    for name, keys in keyed:
        names.setdefault(root(keys[0]), []).append(name)
        tasks.setdefault(root(keys[0]), set()).update(k for k in keys if k in costs)
    return [
        Unit(tuple(names[r]), sum(unknown_cost if costs[k] is None else float(costs[k]) for k in tasks[r]))
        for r in names
    ]


def item_shards(items: Sequence[tuple[str, Sequence[tuple[Path, str, Any]]]], count: int, data_dir: Path | None,
                num_fewshot: int | None) -> dict[str, int]:
    """Each item's shard (1-based) of `count`. `items`: (name, the tasks it scores as (task file, config hash, task
    config); none for a custom test) in collection order."""
    costs: dict[Hashable, float | None] = {}
    for _, tasks in items:
        for source, config_hash, config in tasks:
            if (source, config_hash) not in costs:
                costs[(source, config_hash)] = estimated_cost(config, data_dir, num_fewshot)
    units = join_units([(name, [(source, config_hash) for source, config_hash, _ in tasks]) for name, tasks in items],
                       costs)
    return assign(units, count)


def assign(units: Sequence[Unit], count: int) -> dict[str, int]:
    """Each item's shard (1-based): largest unit first, to the least loaded shard."""
    loads = [0.0] * count
    shards: dict[str, int] = {}
    for unit in sorted(units, key=lambda u: (-u.cost, u.names[0])):
        index = min(range(count), key=lambda i: (loads[i], i))
        loads[index] += unit.cost
        for name in unit.names:
            shards[name] = index + 1
    return shards


def estimated_cost(config: Any, data_dir: Path | None, num_fewshot: int | None) -> float | None:
    """The bytes of the task's evaluation split times (1 + shots); None when its data is not a local file."""
    split = config.eval_split
    mirrored = mirror_files(config, data_dir) or {}
    paths = [mirrored[split]] if split in mirrored else resolved_data_files(config, split)
    files = [Path(p) for p in paths if Path(p).is_file()]
    if not files:
        return None
    shots = num_fewshot if num_fewshot is not None else config.num_fewshot or 0
    return float(sum(p.stat().st_size for p in files)) * (1 + shots)
