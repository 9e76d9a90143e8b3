"""SIGKILL at random moments of a real `pytest --snapshot-update`: is every baseline file whole afterwards?

    python benchmarks/kill_during_snapshot_update.py [--kills 20] [--seed 0]

A project of four two-choice tasks (200 documents each, tests/fixtures/gate_tasks.py) scored by a tiny random
model, its baselines first recorded with --limit=30. Each round puts those baselines back, starts `pytest
--snapshot-update --no-cache --batch-size=1` (every baseline is rewritten: the limit changed) and SIGKILLs it at a
moment drawn uniformly over one whole run's duration (measured first, unkilled). Then every file under baselines/
is read back: each baseline must parse and validate (gate/baseline_file.py `parse`, its checksum included) and be
either the old recording (limit 30) or the new one (all 200 documents); the gate policy file must be JSON; no
temporary file may be left where a reader would take it for a baseline. A killed run can leave the set mixed (some
tasks rewritten, some not); the last mixed round is then gated once without --snapshot-update, to show what the
next run says about it (the killed update's mark, gate/storage.py, names the baselines it rewrote). Printed: one row per kill, and the totals.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.errors import BaselineError  # noqa: E402
from pytest_modelbench.gate.baseline_file import parse  # noqa: E402
from pytest_modelbench.gate.storage import UPDATE_MARK  # noqa: E402
from tests.fixtures.gate_tasks import pool_documents, write_task  # noqa: E402
from tests.fixtures.tiny_models import build_tiny_causal_lm  # noqa: E402

TASKS = tuple(f"kill_probe_{i}" for i in range(4))
DOCS, LIMIT = 200, 30


def pytest_command(model: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", f"--model={model}", "--batch-size=1", "-p", "no:cacheprovider", "-q",
            "--no-cache", *args]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1"}


def fates(baselines: Path) -> tuple[list[str], list[str]]:
    """Each baseline's fate ('old', 'new') and every problem found under the folder."""
    found, problems = [], []
    for path in sorted((baselines / "default" / "probe").glob("*.json")):
        try:
            record = parse(path.read_text(encoding="utf-8"), path)
        except BaselineError as exc:
            problems.append(str(exc))
            continue
        if record.provenance.limit == LIMIT and len(record.doc_keys) == LIMIT:
            found.append("old")
        elif record.provenance.limit is None and len(record.doc_keys) == DOCS:
            found.append("new")
        else:
            problems.append(f"{path.name}: neither recording (limit {record.provenance.limit}, "
                            f"{len(record.doc_keys)} documents)")
    if len(found) + len(problems) != len(TASKS):
        problems.append(f"{len(found) + len(problems)} baselines, not {len(TASKS)}")
    policy = baselines / "default" / "gate-policy.json"
    try:
        json.loads(policy.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"gate-policy.json: {exc}")
    readable_leftovers = [p.name for p in baselines.rglob("*.json")
                          if p.name.startswith(".") and not p.name.startswith(UPDATE_MARK)]
    problems += [f"temporary file named like a baseline: {name}" for name in readable_leftovers]
    return found, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        model = build_tiny_causal_lm(root / "model", seed=0)
        for i, task in enumerate(TASKS):
            write_task(root / "suites" / "probe", task, pool_documents(DOCS, seed=i))
        (root / "pytest.ini").write_text("[pytest]\nmodelbench_suites = suites\n")
        env, baselines, saved = environment(), root / "baselines", root / "saved-baselines"
        subprocess.run(pytest_command(model, f"--limit={LIMIT}", "--snapshot-update"), cwd=root, env=env, check=True,
                       capture_output=True)
        shutil.copytree(baselines, saved)
        began = time.monotonic()
        subprocess.run(pytest_command(model, "--snapshot-update"), cwd=root, env=env, check=True, capture_output=True)
        whole = time.monotonic() - began
        print(f"one whole --snapshot-update run: {whole:.1f} s (4 tasks x {DOCS} documents, batch size 1, no cache)")
        print(f"{'kill':>4}  {'at (s)':>6}  {'old':>3}  {'new':>3}  {'tmp left':>8}  {'mark left':>9}  problems")
        mixed_round, totals = None, {"old": 0, "new": 0, "problems": 0, "tmp": 0, "marked": 0}
        for k in range(args.kills):
            shutil.rmtree(baselines)
            shutil.copytree(saved, baselines)  # copies keep their times: older than this round's update
            moment = rng.uniform(0, whole)
            process = subprocess.Popen(pytest_command(model, "--snapshot-update"), cwd=root, env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(moment)
            process.send_signal(signal.SIGKILL)
            process.wait()
            found, problems = fates(baselines)
            marked = len(list(baselines.rglob(f"{UPDATE_MARK}*.json")))
            totals["marked"] += marked
            leftovers = [p for p in baselines.rglob("*.tmp")]
            for leftover in leftovers:
                leftover.unlink()
            totals["old"] += found.count("old")
            totals["new"] += found.count("new")
            totals["problems"] += len(problems)
            totals["tmp"] += len(leftovers)
            if "old" in found and "new" in found:
                mixed_round = k
                shutil.rmtree(root / "mixed", ignore_errors=True)
                shutil.copytree(baselines, root / "mixed")
            print(f"{k:>4}  {moment:>6.1f}  {found.count('old'):>3}  {found.count('new'):>3}  {len(leftovers):>8}  "
                  f"{'yes' if marked else '-':>9}  {'; '.join(problems) or '-'}")
        print(f"totals over {args.kills} kills: {totals['old']} baselines old, {totals['new']} new, "
              f"{totals['problems']} problems, {totals['tmp']} temporary files left (hidden .*.tmp, never read), "
              f"{totals['marked']} update marks left (killed after its first baseline was judged, before it ended)")
        if mixed_round is not None:
            shutil.rmtree(baselines)
            shutil.copytree(root / "mixed", baselines)
            gated = subprocess.run(pytest_command(model, "--results-json=after.json"), cwd=root, env=env,
                                   capture_output=True, text=True)
            gate = json.loads((root / "after.json").read_text())["gate"]
            print(f"the next run (no --snapshot-update) on kill {mixed_round}'s mixed set: exit {gated.returncode}; "
                  + ", ".join(f"{task} {outcome['status']}" for task, outcome in sorted(gate.items())))
            print("  it says: " + next((line for line in gated.stdout.splitlines() if "did not finish" in line),
                                       "(nothing about the killed update)"))


if __name__ == "__main__":
    main()
