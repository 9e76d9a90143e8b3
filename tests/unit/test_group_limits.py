"""Group trees at their limits: nesting far deeper than lm-eval's groups, and task code written in a group entry."""

from __future__ import annotations

import pytest

from pytest_modelbench.errors import TaskConfigError
from pytest_modelbench.tasks.groups import MAX_GROUP_DEPTH, TaskIndex, load_group, load_group_config, resolve_group

TASK = ("task: t\ndataset_path: json\ndataset_kwargs:\n  data_files: {test: d.jsonl}\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: [a, b]\n")


def nested_groups(folder, depth):
    (folder / "t.yaml").write_text(TASK)
    for level in range(depth):
        member = f"g{level + 1}" if level + 1 < depth else "t"
        (folder / f"g{level}.yaml").write_text(f"group: g{level}\ntask:\n  - {member}\n")
    return folder / "g0.yaml"


def test_groups_nested_beyond_the_limit_are_refused_with_the_file_and_the_chain(tmp_path):
    """Hundreds of levels ended in a RecursionError (an INTERNALERROR under pytest)."""
    top = nested_groups(tmp_path, MAX_GROUP_DEPTH + 1)
    with pytest.raises(TaskConfigError, match=rf"g{MAX_GROUP_DEPTH - 1}.yaml: groups nest more than "
                                              rf"{MAX_GROUP_DEPTH} levels deep \(g0 -> ... -> g{MAX_GROUP_DEPTH - 1} "
                                              rf"-> g{MAX_GROUP_DEPTH}\); flatten the tree"):
        resolve_group(load_group_config(top), TaskIndex.of(tmp_path))


def test_groups_nested_to_the_limit_resolve(tmp_path):
    top = nested_groups(tmp_path, MAX_GROUP_DEPTH)
    tree = resolve_group(load_group_config(top), TaskIndex.of(tmp_path))
    assert [leaf.name for leaf in tree.leaves()] == ["t"]


def test_task_code_in_a_group_entry_is_named_with_the_group_file(tmp_path):
    """The error named only the task's file, where no `!function` is written."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text(TASK)
    group = tmp_path / "g.yaml"
    group.write_text("group: g\ntask:\n  - task: t\n    process_docs: !function nowhere.keep\n")
    with pytest.raises(TaskConfigError, match=r"its task 't': .*t.yaml: key 'process_docs' \(written in "
                                              rf"{group}\): module file .*nowhere.py not found"):
        load_group(group, [tmp_path], {}, allow_task_code=True)
