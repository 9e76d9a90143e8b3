"""Task files refused at collection, grouped by reason for the terminal summary.

A task file's error names the file first (`<path>: <problem>`). The reason a file is grouped under is that problem
without what differs from file to file: the function a `!function` tag names, the path an include was looked for
at, the position of a YAML syntax error. So lm-eval's thousands of files fall into a few dozen groups.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Iterable

_PER_FILE_DETAILS = (
    (re.compile(r"!function [\w.]+"), "!function ..."),
    (re.compile(r"cannot load [\w.]+: "), "cannot load ...: "),
    (re.compile(r" \(looked for [^)]*\)"), ""),
    (re.compile(r"^(malformed YAML|not a UTF-8 text file).*", re.DOTALL), r"\1"),
    # a group file's refusal names the group, and for a task of it the task and its file
    (re.compile(r"^group '[^']*'"), "group '...'"),
    (re.compile(r"task '[^']*': \S+\.ya?ml: "), "task '...': "),
)


def refusal_reason(path: Path, message: str) -> str:
    """The problem in `message` (an error about `path`) without the file name and the per-file details."""
    prefix = f"{path}: "
    reason = message[len(prefix):] if message.startswith(prefix) else message
    for pattern, replacement in _PER_FILE_DETAILS:
        reason = pattern.sub(replacement, reason)
    return reason


def group_refusals(refusals: Iterable[tuple[Path, str]]) -> list[tuple[str, list[Path]]]:
    """(reason, files) pairs, the most common reason first; files in path order."""
    groups: dict[str, list[Path]] = defaultdict(list)
    for path, message in refusals:
        groups[refusal_reason(path, message)].append(path)
    return sorted(((reason, sorted(paths)) for reason, paths in groups.items()), key=lambda g: (-len(g[1]), g[0]))


def format_refusals(refusals: Iterable[tuple[Path, str]], *, start: Path, examples: int = 3) -> list[str]:
    """One line per reason with its count, then up to `examples` of its files relative to `start`."""
    lines = []
    for reason, paths in group_refusals(refusals):
        lines.append(f"{len(paths):>6}  {reason}")
        for path in paths[:examples]:
            lines.append(f"        {os.path.relpath(path, start)}")
        if len(paths) > examples:
            lines.append(f"        ... and {len(paths) - examples} more")
    return lines
