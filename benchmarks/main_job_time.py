"""Time to a verdict: the main job (suites/bias, packaged default model, empty score cache) under several settings.

    python benchmarks/main_job_time.py --data-dir .modelbench-data [--configs "1x1;autox1;8x2"] [--keep DIR]

Each configuration is `BATCHxWORKERS` (`--batch-size` and pytest-xdist workers, one torch thread per worker when
there are several, as scripts/test.sh runs them). Each runs the main job's pytest command in a fresh process with a
fresh, empty `MODELBENCH_CACHE_DIR`, writes `--results-json`, and is compared with the first configuration: wall
time and its ratio, each task's gate status, and the largest |Δ| of any category score. Run it on quiet cores: the
figures are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_config(text: str) -> tuple[str, int]:
    batch, _, workers = text.strip().partition("x")
    return batch.strip(), int(workers or 1)


def run_main_job(batch: str, workers: int, data_dir: str, scratch: Path, extra: tuple[str, ...] = (),
                 label: str = "") -> tuple[float, dict, int]:
    """One main-job run in a fresh process with a fresh, empty score cache: (seconds, its JSON output, exit status).
    `extra`: more pytest arguments; with `--run-record=PATH` among them, PATH is the JSON read back."""
    name = label or f"{batch}x{workers}"
    cache = scratch / f"cache-{name}"
    shutil.rmtree(cache, ignore_errors=True)  # empty, also when --keep names a folder of an earlier run
    results = scratch / f"results-{name}.json"
    output = next((Path(a.split("=", 1)[1]) for a in extra if a.startswith("--run-record=")), results)
    env = dict(os.environ, MODELBENCH_CACHE_DIR=str(cache))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--model=smollm2-135m",
               "--dtype=float32", f"--data-dir={data_dir}", f"--batch-size={batch}", f"--results-json={results}",
               *extra, "suites/bias"]
    if workers > 1:
        env["OMP_NUM_THREADS"] = "1"
        command += ["-n", str(workers), "--dist", "worksteal"]
    started = time.perf_counter()
    finished = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if not output.exists():
        sys.exit(f"{name}: no {output.name} (exit {finished.returncode})\n{finished.stdout[-3000:]}")
    return seconds, json.loads(output.read_text()), finished.returncode


def category_scores(results: dict) -> dict[tuple[str, str, str], float]:
    scores = {}
    for task, categories in results["categories"].items():
        for category, values in categories.items():
            for metric, value in values.items():
                if metric != "n" and not metric.endswith("_stderr") and value is not None:
                    scores[(task, category, metric)] = value
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--configs", default="1x1;autox1",
                        help="semicolon-separated BATCHxWORKERS, run in this order")
    parser.add_argument("--reference", default="1x1", help="the configuration the others are compared with")
    parser.add_argument("--keep", help="keep caches and results JSON here (default: a temporary folder)")
    args = parser.parse_args()

    scratch = Path(args.keep or tempfile.mkdtemp(prefix="main-job-time-"))
    scratch.mkdir(parents=True, exist_ok=True)
    runs = {}
    for text in args.configs.split(";"):
        batch, workers = parse_config(text)
        seconds, results, code = run_main_job(batch, workers, args.data_dir, scratch)
        statuses = {task: outcome["status"] for task, outcome in sorted(results["gate"].items())}
        runs[f"{batch}x{workers}"] = (seconds, statuses, category_scores(results), code)
        print(f"{batch}x{workers}: {seconds:.1f} s, exit {code}, {statuses}", flush=True)

    reference_name = "x".join(map(str, parse_config(args.reference)))
    reference = runs[reference_name]
    print(f"\n{'config':>8} {'wall':>9} {'speed-up':>8} {'exit':>4}  against {reference_name}")
    for name, (seconds, statuses, scores, code) in runs.items():
        shared = scores.keys() & reference[2].keys()
        delta = max(abs(scores[key] - reference[2][key]) for key in shared)
        same = "same gate statuses" if statuses == reference[1] else f"GATE STATUSES DIFFER: {statuses}"
        minutes, rest = divmod(seconds, 60)
        print(f"{name:>8} {int(minutes):>3}m{rest:04.1f}s {reference[0] / seconds:>8.2f} {code:>4}  {same}; "
              f"max |Δ| {delta:.1e} over {len(shared)} category scores")


if __name__ == "__main__":
    main()
