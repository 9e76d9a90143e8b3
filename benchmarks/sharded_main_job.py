"""The main job run as shards and merged, against the same job in one process: same verdicts, and the time to one.

    python benchmarks/sharded_main_job.py --data-dir .modelbench-data [--shards 4] [--keep DIR]

Runs the main job (suites/bias, packaged default model, empty score caches) once unsharded with --results-json,
then as N shards one after another (each a fresh process with its own empty score cache, as on N machines), merges
their run records with `python -m pytest_modelbench merge`, and compares the merged results JSON with the unsharded
one (the whole file, and each task's gate status). Prints each shard's wall time and the ratios that matter: the
slowest shard to the unsharded run (the time to a verdict on N machines) and the slowest shard to the mean one (the
balance). Run it on quiet cores: the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from main_job_time import REPO, run_main_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--batch-size", default="auto")
    parser.add_argument("--keep", help="keep caches, records and results here (default: a temporary folder)")
    args = parser.parse_args()
    scratch = Path(args.keep or tempfile.mkdtemp(prefix="sharded-main-job-")).resolve()
    scratch.mkdir(parents=True, exist_ok=True)

    seconds, one, code = run_main_job(args.batch_size, 1, args.data_dir, scratch, label="unsharded")
    print(f"unsharded: {seconds:.1f} s, exit {code}", flush=True)
    records, times = [], []
    for k in range(1, args.shards + 1):
        record = scratch / f"shard-{k}.json"
        shard_seconds, written, shard_code = run_main_job(
            args.batch_size, 1, args.data_dir, scratch, label=f"shard-{k}",
            extra=(f"--shard={k}/{args.shards}", f"--run-record={record}"),
        )
        records.append(record)
        times.append(shard_seconds)
        print(f"shard {k}/{args.shards}: {shard_seconds:.1f} s, exit {shard_code}, tasks {written['tasks']}", flush=True)
    merged_path = scratch / "merged.json"
    merge = subprocess.run([sys.executable, "-m", "pytest_modelbench", "merge", *map(str, records),
                            f"--results-json={merged_path}"], cwd=REPO, capture_output=True, text=True)
    if not merged_path.exists():
        sys.exit(f"merge wrote no results (exit {merge.returncode}): {merge.stderr}")
    merged = json.loads(merged_path.read_text())
    statuses = {task: outcome["status"] for task, outcome in sorted(one["gate"].items())}
    merged_statuses = {task: outcome["status"] for task, outcome in sorted(merged["gate"].items())}
    print(f"\nunsharded exit {code}, merged exit {merge.returncode}; gate statuses {statuses}")
    print("merged gate statuses: " + ("the same" if merged_statuses == statuses else f"DIFFER: {merged_statuses}"))
    print("merged results JSON: " + ("identical to the unsharded one" if merged == one else "DIFFERS"))
    mean = sum(times) / len(times)
    print(f"slowest shard / unsharded: {max(times) / seconds:.2f}; slowest shard / mean shard: {max(times) / mean:.2f}; "
          f"all shards / unsharded: {sum(times) / seconds:.2f}")


if __name__ == "__main__":
    main()
