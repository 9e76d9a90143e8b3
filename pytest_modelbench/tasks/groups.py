"""lm-eval 0.4.13 groups: a group YAML, the names its `task` list can use, and the tree of tasks it resolves to.

A group file has a `group` key (lm-eval's rule, whatever else it holds). Its `task` list names tasks, tags (each
expanded into its tasks, sorted by name, as lm-eval does) or other groups, found by name in the group's index: every
YAML under the innermost `modelbench_suites` folder that holds the group file, else under the group file's own
folder. An entry may be a mapping (`task:` or `group:` with a name, and keys that override the settings of what it
names, `num_fewshot: 5` say); the group file's other keys override every member's. Overrides reach every task under
the entry, merged over the task file's keys (lm-eval's shallow merge, the nearest entry winning).

`aggregate_metric_list` says which metrics the group aggregates over its leaf tasks (metrics/group_scores.py). A
group without it has no score in lm-eval: it is a bundle (`openllm`, `pythia`), and each of its members is gated as
an item of its own, with the bundle's overrides.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_modelbench.errors import ModelbenchError, TaskConfigError
from pytest_modelbench.tasks.config import TaskConfig, load_task_config
from pytest_modelbench.tasks.gate_block import GateTolerance, check_metric_block, checked_gate_block
from pytest_modelbench.tasks.identity import TaskId, identify
from pytest_modelbench.tasks.yaml_loader import FunctionRef, load_merged_yaml, read_yaml_file

_GROUP_KEYS = {"group", "group_alias", "task", "aggregate_metric_list", "metadata", "modelbench"}
_AGGREGATE_KEYS = {"metric", "aggregation", "weight_by_size", "filter_list"}


@dataclass(frozen=True)
class AggregateMetric:
    """One `aggregate_metric_list` entry: the mean of `metric` over the leaf tasks that score it, per filter."""

    metric: str
    filter_list: tuple[str, ...] | None = None  # None: every filter the leaf tasks score the metric under
    weight_by_size: bool = True  # Σ m·n / Σ n over leaf tasks; False: the plain mean of the leaf tasks' values


@dataclass(frozen=True)
class Member:
    name: str  # a task, tag or group name
    overrides: dict[str, Any] = field(default_factory=dict)  # the entry's own keys (a mapping entry)


@dataclass(frozen=True)
class GroupConfig:
    group: str
    source: Path
    members: tuple[Member, ...]
    aggregate_metrics: tuple[AggregateMetric, ...]
    alias: str | None = None
    version: Any = "N/A"
    gate: GateTolerance = GateTolerance()
    config_hash: str = ""  # of the group file alone; the resolved tree's hash adds its tasks' (GroupTree)
    overrides: dict[str, Any] = field(default_factory=dict)  # the file's other keys: over every member's settings

    @property
    def is_bundle(self) -> bool:
        """No aggregate_metric_list: lm-eval gives the group no score, so its members are gated one by one."""
        return not self.aggregate_metrics


@dataclass(frozen=True)
class LeafTask:
    name: str
    path: Path
    overrides: dict[str, Any] = field(default_factory=dict)  # from the groups above it (module docstring)


@dataclass(frozen=True)
class GroupTree:
    """A group resolved to its members: leaf tasks and subgroups, in the group's order."""

    config: GroupConfig
    children: tuple["GroupTree | LeafTask", ...]

    @property
    def name(self) -> str:
        return self.config.group

    def leaves(self) -> list[LeafTask]:
        """Every leaf task, recursively (what lm-eval aggregates over, not the subgroups' scores)."""
        found: list[LeafTask] = []
        for child in self.children:
            found.extend(child.leaves() if isinstance(child, GroupTree) else [child])
        return found

    def subgroups(self) -> list["GroupTree"]:
        """Every subgroup, recursively, parents before their own subgroups."""
        found: list[GroupTree] = []
        for child in self.children:
            if isinstance(child, GroupTree):
                found += [child, *child.subgroups()]
        return found


def is_group_file(path: Path) -> bool:
    try:
        return "group" in read_yaml_file(path)
    except TaskConfigError:
        return False  # is_task_file collects broken files, so that the user sees the error once


def load_group_config(path: Path) -> GroupConfig:
    raw = load_merged_yaml(path)
    if isinstance(raw.get("task"), str) and set(raw) - _GROUP_KEYS:
        raise TaskConfigError(f"{path}: a task file with a 'group' key (lm-eval's legacy form, which registers the "
                              "group only) is not supported; name the task's groups with 'tag' instead")
    name = raw.get("group")
    if not isinstance(name, str) or not name:
        raise TaskConfigError(f"{path}: key 'group' must be a group name")
    members = raw.get("task")
    if isinstance(members, str):
        members = [members]
    if not isinstance(members, list) or not members:
        raise TaskConfigError(f"{path}: key 'task' must list the group's tasks, tags or groups")
    parsed = []
    for member in members:
        if isinstance(member, dict):
            key = "task" if "task" in member else "group"
            if not isinstance(member.get(key), str):
                raise TaskConfigError(f"{path}: key 'task': a mapping entry needs a 'task' or 'group' name")
            parsed.append(Member(member[key], {k: v for k, v in member.items() if k != "group"}))
        elif isinstance(member, str) and member:
            parsed.append(Member(member))
        else:
            raise TaskConfigError(f"{path}: key 'task': each entry must be a task, tag or group name, got {member!r}")
    metadata = raw.get("metadata") or {}
    alias = raw.get("group_alias")
    if alias is not None and not isinstance(alias, str):
        raise TaskConfigError(f"{path}: key 'group_alias' must be a string")
    aggregate_metrics = _aggregate_metrics(raw.get("aggregate_metric_list"), path)
    return GroupConfig(
        group=name,
        source=path,
        members=tuple(parsed),
        aggregate_metrics=aggregate_metrics,
        alias=alias,
        version=metadata.get("version", "N/A") if isinstance(metadata, dict) else "N/A",
        gate=_gate(raw.get("modelbench"), path, aggregate_metrics),
        config_hash=_hash({k: v for k, v in raw.items() if k not in ("group_alias", "modelbench")}),
        overrides={k: v for k, v in raw.items() if k not in _GROUP_KEYS},
    )


def _aggregate_metrics(raw: Any, path: Path) -> tuple[AggregateMetric, ...]:
    if raw is None:
        return ()
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        raise TaskConfigError(f"{path}: key 'aggregate_metric_list' must be a list of metrics")
    metrics = []
    for i, entry in enumerate(raw):
        where = f"{path}: key 'aggregate_metric_list[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("metric"), str):
            raise TaskConfigError(f"{where}' must be a mapping with a 'metric' name")
        unknown = sorted(set(entry) - _AGGREGATE_KEYS)
        if unknown:
            raise TaskConfigError(f"{where}.{unknown[0]}' is not an aggregate_metric_list key")
        aggregation = entry.get("aggregation", "mean")
        if isinstance(aggregation, FunctionRef) or aggregation != "mean":
            raise TaskConfigError(f"{where}.aggregation': only 'mean' is supported for a group, got {aggregation!r}")
        weight_by_size = entry.get("weight_by_size", True)
        if not isinstance(weight_by_size, bool):
            raise TaskConfigError(f"{where}.weight_by_size' must be true or false")
        filters = entry.get("filter_list")
        if isinstance(filters, str):
            filters = [filters]
        if filters is not None and (not isinstance(filters, list) or not all(isinstance(f, str) for f in filters)):
            raise TaskConfigError(f"{where}.filter_list' must be a filter name or a list of them")
        metrics.append(AggregateMetric(entry["metric"], None if filters is None else tuple(filters), weight_by_size))
    return tuple(metrics)


def _gate(modelbench: Any, path: Path, aggregate_metrics: tuple[AggregateMetric, ...]) -> GateTolerance:
    """A group's `modelbench.gate` block: margins and alpha as in a task file, for the metrics it aggregates."""
    if modelbench is None:
        return GateTolerance()
    if not isinstance(modelbench, dict) or set(modelbench) - {"gate"}:
        raise TaskConfigError(f"{path}: key 'modelbench' of a group file may only hold 'gate'")
    gate = checked_gate_block(modelbench.get("gate"), path)
    if "cluster" in gate:
        raise TaskConfigError(f"{path}: key 'modelbench.gate.cluster' belongs in a task file: a group's documents "
                              "keep the clusters their tasks declare")
    check_metric_block(gate.get("metrics"), {spec.metric for spec in aggregate_metrics}, set(), path, in_group=True)
    return GateTolerance(**{**gate, "metrics": gate.get("metrics") or {}})


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=lambda o: getattr(o, "dotted_name", repr(o)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- names


@dataclass
class TaskIndex:
    """Tasks, groups and tags by name, over one folder's YAMLs (lm-eval's TaskIndex: sorted paths, a later file
    wins a name). Files that cannot be read are left out here; collecting them reports them."""

    root: Path
    tasks: dict[str, Path] = field(default_factory=dict)
    groups: dict[str, Path] = field(default_factory=dict)
    tags: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, root: Path) -> "TaskIndex":
        index = cls(root)
        for path in sorted(root.rglob("*.yaml")):
            try:
                raw = load_merged_yaml(path) if "group" not in read_yaml_file(path) else read_yaml_file(path)
            except ModelbenchError:
                continue
            if isinstance(raw.get("group"), str):
                index.groups[raw["group"]] = path
                continue
            if not isinstance(raw.get("task"), str):
                continue
            index.tasks[raw["task"]] = path
            tags = raw.get("tag") or ()
            for tag in [tags] if isinstance(tags, str) else tags if isinstance(tags, list) else ():
                if isinstance(tag, str):
                    index.tags.setdefault(tag, []).append(raw["task"])
        return index


def index_root(group_file: Path, suite_roots: Iterable[Path]) -> Path:
    """Where a group's member names are looked up (module docstring)."""
    holders = [Path(r).resolve() for r in suite_roots if Path(r).resolve() in group_file.resolve().parents]
    return max(holders, key=lambda r: len(r.parts)) if holders else group_file.resolve().parent


MAX_GROUP_DEPTH = 32  # lm-eval's deepest groups nest 3 levels; far beyond that is a generated or broken tree


def resolve_group(config: GroupConfig, index: TaskIndex, overrides: dict[str, Any] | None = None,
                  _chain: tuple[str, ...] = ()) -> GroupTree:
    """The group's tree; a name that is no task, tag or group of the index, a cycle, or a task reached twice is an
    error naming the group file. `overrides`: those of the groups above (module docstring)."""
    chain = (*_chain, config.group)
    inherited = {**config.overrides, **(overrides or {})}  # the caller's entry wins over the group file's keys
    children: list[GroupTree | LeafTask] = []
    for member in config.members:
        name, merged = member.name, {**inherited, **member.overrides}
        if name in index.groups:
            if name in chain:
                raise TaskConfigError(f"{config.source}: group cycle: {' -> '.join((*chain, name))}")
            if len(chain) >= MAX_GROUP_DEPTH:
                raise TaskConfigError(f"{config.source}: groups nest more than {MAX_GROUP_DEPTH} levels deep "
                                      f"({chain[0]} -> ... -> {config.group} -> {name}); flatten the tree")
            merged.pop("task", None)  # the entry's name, not a setting of the group's tasks
            children.append(resolve_group(load_group_config(index.groups[name]), index, merged, chain))
        elif name in index.tasks:
            children.append(LeafTask(name, index.tasks[name], merged))
        elif name in index.tags:
            merged.pop("task", None)
            children += [LeafTask(task, index.tasks[task], merged) for task in sorted(set(index.tags[name]))]
        elif member.overrides:
            raise TaskConfigError(f"{config.source}: key 'task': an inline definition of '{name}' (a task or group "
                                  "with no file of its own) is not supported; put it in a file of its own")
        else:
            raise TaskConfigError(
                f"{config.source}: group '{config.group}' lists '{name}', which is no task, tag or group of the "
                f"YAML files under {index.root}"
            )
    tree = GroupTree(config, tuple(children))
    if not _chain:
        seen: dict[str, int] = {}
        for leaf in tree.leaves():
            seen[leaf.name] = seen.get(leaf.name, 0) + 1
        twice = sorted(name for name, count in seen.items() if count > 1)
        if twice:
            raise TaskConfigError(f"{config.source}: group '{config.group}' reaches task '{twice[0]}' more than once "
                                  "(through two of its members); a task is counted once in a group's score")
    return tree


def tree_hash(tree: GroupTree, leaf_hashes: Mapping[str, str]) -> str:
    """What a group's baseline depends on: every group file's scoring keys and every leaf task's config hash."""
    def shape(node: GroupTree | LeafTask) -> Any:
        if isinstance(node, LeafTask):
            return [node.name, leaf_hashes[node.name]]
        return [node.config.group, node.config.config_hash, [shape(child) for child in node.children]]
    return _hash(shape(tree))


@dataclass(frozen=True)
class ScorableGroup:
    """A resolved group with each leaf task's config and identity: what the runner scores."""

    tree: GroupTree
    leaf_tasks: tuple[tuple[LeafTask, TaskConfig, TaskId], ...]


def load_group(path: Path, suite_roots: Iterable[Path], indexes: dict[Path, TaskIndex], *,
               allow_task_code: bool = False) -> ScorableGroup:
    """The group file at `path`, resolved and its tasks loaded; `indexes`: the session's indexes by root, reused."""
    root = index_root(path, suite_roots)
    if root not in indexes:
        indexes[root] = TaskIndex.of(root)
    tree = resolve_group(load_group_config(path), indexes[root])
    suite_roots = list(suite_roots)
    leaf_tasks = []
    for leaf in tree.leaves():
        try:
            config = load_task_config(leaf.path, allow_task_code=allow_task_code, overrides=leaf.overrides)
        except TaskConfigError as exc:
            raise TaskConfigError(f"{path}: group '{tree.name}' cannot be scored: its task '{leaf.name}': {exc}") from None
        identity = identify(leaf.path, config.task, suite_roots)
        if leaf.overrides:  # not the task of its own file: scored apart, and reported under the group's name
            identity = TaskId(identity.suite, f"{tree.name}::{config.task}")
        leaf_tasks.append((leaf, config, identity))
    return ScorableGroup(tree, tuple(leaf_tasks))


def bundle_members(group: ScorableGroup) -> list[tuple[str, ScorableGroup | tuple[TaskConfig, TaskId]]]:
    """A bundle's members, each gated on its own (its groups' bundles expanded in turn): (name, a group to score, or
    a task's config and identity). Named `<bundle>::<member>`."""
    by_leaf = {leaf.name: (config, identity) for leaf, config, identity in group.leaf_tasks}
    found: list[tuple[str, ScorableGroup | tuple[TaskConfig, TaskId]]] = []
    for child in group.tree.children:
        if isinstance(child, LeafTask):
            found.append((f"{group.tree.name}::{child.name}", by_leaf[child.name]))
            continue
        sub = ScorableGroup(child, tuple(t for t in group.leaf_tasks if t[0].name in {l.name for l in child.leaves()}))
        if child.config.is_bundle:
            found += [(f"{group.tree.name}::{name}", member) for name, member in bundle_members(sub)]
        else:
            found.append((f"{group.tree.name}::{child.name}", sub))
    return found
