"""How long `pytest --collect-only` takes on lm-eval 0.4.13's whole `tasks` folder, and which files it refuses.

    python benchmarks/collect_lmeval_tasks.py TASKS_DIR [--named 3000]

TASKS_DIR is `lm_eval/tasks` from lm-eval's wheel; reading YAMLs needs none of lm-eval's dependencies:

    python3 -m venv /tmp/lmeval-venv && /tmp/lmeval-venv/bin/pip download --no-deps lm-eval==0.4.13 -d /tmp/lmeval-wheel
    unzip -q /tmp/lmeval-wheel/lm_eval-0.4.13-py3-none-any.whl 'lm_eval/tasks/*' -d /tmp/lmeval-src
    python benchmarks/collect_lmeval_tasks.py /tmp/lmeval-src/lm_eval/tasks

Two runs of pytest, each in a fresh process started in an empty folder (so no project's ini applies): the folder
itself, then the first `--named` task files named one by one on the command line. `-p no:python` keeps pytest
from importing lm-eval's own Python test files, which need lm-eval installed. Prints each run's wall and CPU time,
its item count and the refusal summary pytest-modelbench writes (refused files grouped by reason).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_collection(arguments: list[str], folder: Path) -> tuple[float, float, list[str]]:
    """(wall seconds, CPU seconds, output lines) of one `pytest --collect-only -q` run started in `folder`."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:python", "-p", "no:cacheprovider"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(command + arguments, cwd=folder, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if completed.returncode not in (0, 2):  # 2: pytest stops after collection when refused files are errors
        sys.exit(f"pytest exited with {completed.returncode}:\n{completed.stdout[-3000:]}{completed.stderr[-3000:]}")
    return wall, cpu, completed.stdout.splitlines()


def summary(lines: list[str]) -> list[str]:
    """The refusal section without its example files, and the final count line."""
    start = next((i for i, line in enumerate(lines) if "refused, by reason" in line), None)
    if start is None:
        return lines[-1:]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return [line for line in lines[start:end] if not line.startswith("        ")] + lines[-1:]


def task_files(tasks_dir: Path, count: int) -> list[str]:
    from pytest_modelbench.tasks.config import is_task_file

    found = []
    for path in sorted(tasks_dir.rglob("*.yaml")):
        if is_task_file(path):
            found.append(str(path))
            if len(found) == count:
                break
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks_dir", type=Path, help="lm_eval/tasks from lm-eval 0.4.13's wheel")
    parser.add_argument("--named", type=int, default=3000, help="task files to name on the command line (0: skip)")
    args = parser.parse_args()
    tasks_dir = args.tasks_dir.resolve()
    yamls = sum(1 for _ in tasks_dir.rglob("*.yaml"))

    with tempfile.TemporaryDirectory() as empty:
        folder = Path(empty)
        (folder / "pytest.ini").write_text("[pytest]\n")
        wall, cpu, lines = run_collection([str(tasks_dir)], folder)
        print(f"folder: {tasks_dir} ({yamls} .yaml files)")
        print(f"collection of the folder: {wall:.1f} s wall, {cpu:.1f} s CPU ({os.cpu_count()} CPUs)")
        print("\n".join(summary(lines)))
        if args.named:
            named = task_files(tasks_dir, args.named)
            wall, cpu, lines = run_collection(named, folder)
            print(f"\n{len(named)} task files named on the command line: {wall:.1f} s wall, {cpu:.1f} s CPU")
            print(lines[-1])


if __name__ == "__main__":
    main()
