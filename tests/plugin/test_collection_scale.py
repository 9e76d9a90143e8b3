"""Collection at scale: thousands of task YAMLs, named one by one or by folder; refused files grouped by reason."""

from __future__ import annotations

import re
from pathlib import Path

FOLDERS, PER_FOLDER = 200, 10
TASK = "task: {name}\ndataset_path: json\ntest_split: test\noutput_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: [a, b]\n"
REASON_FUNCTION = (
    "key 'process_docs' uses '!function ...', which runs Python code from the suite folder; "
    "pass --allow-task-code to allow it"
)
REASON_FILTER = "key 'filter_list' applies to generate_until tasks only"


def write_suite(root: Path, folders: int = FOLDERS) -> dict[str, list[Path]]:
    """`folders` x PER_FOLDER task files: most load, some call task code (each another function), some use an
    unsupported key; plus a group file in every folder (a gated item of its own, over the folder's first task).
    Returns the task files by expected fate."""
    fates: dict[str, list[Path]] = {"ok": [], REASON_FUNCTION: [], REASON_FILTER: []}
    for f in range(folders):
        folder = root / f"family_{f:03d}"
        folder.mkdir(parents=True)
        (folder / "_group.yaml").write_text(f"group: family_{f:03d}\ntask: [t_{f:03d}_00]\n"
                                            "aggregate_metric_list: [{metric: acc}]\n")
        for i in range(PER_FOLDER):
            name = f"t_{f:03d}_{i:02d}"
            text = TASK.format(name=name)
            if i % 5 == 1:
                text += f"process_docs: !function utils.process_{name}\n"
                fate = REASON_FUNCTION
            elif i % 7 == 2:
                text += "filter_list: []\n"
                fate = REASON_FILTER
            else:
                fate = "ok"
            path = folder / f"{name}.yaml"
            path.write_text(text)
            fates[fate].append(path)
    return fates


def collected(result) -> set[str]:
    return {line.split("::")[-1] for line in result.outlines if "::" in line}


def refusal_counts(result) -> dict[str, int]:
    """reason -> count, from the terminal summary section (its example lines are indented further)."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "task file(s) refused, by reason" in line)
    counts = {}
    for line in lines[start + 1:]:
        if line.startswith("="):
            break
        match = re.match(r"^ *(\d+)  (\S.*)$", line)
        if match:
            counts[match[2]] = int(match[1])
    return counts


def test_thousands_of_files_named_on_the_command_line(pytester):
    fates = write_suite(pytester.path / "suite")
    files = sorted(str(p) for paths in fates.values() for p in paths)
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *files)
    assert collected(result) >= {path.stem for path in fates["ok"]}
    assert refusal_counts(result) == {REASON_FUNCTION: len(fates[REASON_FUNCTION]),
                                      REASON_FILTER: len(fates[REASON_FILTER])}
    result.stdout.fnmatch_lines([
        f"*modelbench: {len(fates[REASON_FUNCTION]) + len(fates[REASON_FILTER])} task file(s) refused, by reason*",
        "        suite/family_000/t_000_01.yaml",  # examples, relative to where pytest was started
    ])


def test_a_folder_reports_its_refused_files_by_reason(pytester):
    fates = write_suite(pytester.path / "suite", folders=40)
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", "suite")
    assert collected(result) >= {path.stem for path in fates["ok"]} | {f"family_{f:03d}" for f in range(40)}
    assert refusal_counts(result) == {REASON_FUNCTION: len(fates[REASON_FUNCTION]),
                                      REASON_FILTER: len(fates[REASON_FILTER])}
    result.stdout.fnmatch_lines([f"        ... and {len(fates[REASON_FILTER]) - 3} more"])
