"""The main job cancelled as CI cancels it: SIGTERM in the middle of its second task, then the re-run.

    python benchmarks/main_job_interrupted.py --data-dir .modelbench-data [--after 20]

Runs the main job's pytest command (scripts/gate-default-model.sh: suites/bias on the packaged default model,
float32, against the committed baselines) with `-v`, a fresh score cache and --results-json. When the first task
item reports its verdict, it waits `--after` seconds (the second task is being scored) and sends SIGTERM. Printed:
how long the run took to exit after the signal, its exit status (11: interrupted), the results JSON's outcome and
the verdicts it kept. Then the same command again with the same cache: its exit status, its wall time, and the
scores it wrote to the cache (a rewritten row counts: so it is only what the first run had not scored).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cached(cache: Path, after: float = 0.0) -> int:
    """The scores in the cache written after `after` (a `created` time)."""
    path = cache / "scores.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path, timeout=30) as connection:
        return connection.execute("SELECT COUNT(*) FROM scores WHERE created > ?", (after,)).fetchone()[0]


def last_write(cache: Path) -> float:
    with sqlite3.connect(cache / "scores.sqlite", timeout=30) as connection:
        return connection.execute("SELECT MAX(created) FROM scores").fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--after", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelbench-interrupted-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "MODELBENCH_CACHE_DIR": str(work / "cache")}
        results = work / "results.json"
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "--model=smollm2-135m",
                   "--dtype=float32", "--baseline-name=default", f"--data-dir={args.data_dir}",
                   f"--results-json={results}", "suites/bias"]
        started = time.monotonic()
        run = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = None
        for line in run.stdout:
            if "::" in line and ("PASSED" in line or "FAILED" in line):
                first = line.split()[0]
                break
        time.sleep(args.after)
        run.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        rest = run.stdout.read()
        run.wait()
        exited = time.monotonic() - signalled
        document = json.loads(results.read_text()) if results.exists() else None
        print(f"first task done: {first} ({signalled - started - args.after:.0f} s into the run); SIGTERM "
              f"{args.after:.0f} s later; exit status {run.returncode}, {exited:.1f} s after the signal")
        if document is None:
            print("no results JSON\n" + rest[-2000:])
            return
        outcome = document["outcome"]
        print(f"results JSON: outcome {outcome['status']}, exit_status {outcome['exit_status']}, unfinished "
              f"{outcome.get('unfinished')}; verdicts kept: "
              + ", ".join(f"{task} {gate['status']}" for task, gate in sorted(document["gate"].items())))
        print("  " + next((line for line in rest.splitlines() if line.startswith("gate interrupted")), "(no headline)"))
        before, moment = cached(work / "cache"), last_write(work / "cache")
        started = time.monotonic()
        rerun = subprocess.run([part for part in command if part != "-v"], cwd=REPO, env=env, capture_output=True,
                               text=True)
        seconds = time.monotonic() - started
        statuses = json.loads(results.read_text())["gate"]
        print(f"re-run: exit status {rerun.returncode} in {seconds:.0f} s; it wrote {cached(work / 'cache', moment)} "
              f"scores to the cache (a row rewritten counts too), beside the {before} the first run cached; "
              f"{cached(work / 'cache')} rows in all (= the two summed: none scored twice); "
              + ", ".join(f"{task} {gate['status']}" for task, gate in sorted(statuses.items())))


if __name__ == "__main__":
    main()
