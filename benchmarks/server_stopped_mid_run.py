"""A real vLLM server stopped in the middle of a gated run, then restarted: integrity before quality end to end.

    python benchmarks/server_stopped_mid_run.py [--pairs 400] [--server-retries 1] [--hang]

Starts vLLM from scripts/setup-vllm.sh's venv (tests/fixtures/vllm_server.py; MODELBENCH_VLLM_VENV and
MODELBENCH_VLLM_MODEL say where), then runs pytest as a release job would: suites/bias/crows_pairs_english.yaml
(`--limit` pairs, two requests each) on the server, recording a baseline (--snapshot-update) into a fresh folder with
a fresh score cache. Once the cache holds some scores it stops the server (SIGKILL to its process group: a crash,
not a drain) and prints what the run gave: its exit status (7: only the run failed), the task's outcome and its
integrity counts from --results-json, and how long the run took to end after the server went away. Then it starts
the server again on the same port and re-runs the same command: exit status, outcome, and the scores the re-run
added to the cache against the requests the first run left unscored (nothing of a failed request is cached, so
these are equal when the re-run scores only what is missing).

--hang: the server is stopped with SIGSTOP instead (it hangs: the kernel still accepts connections, nothing answers),
the run scores CrowS-Pairs English and French, and pytest runs with the default --server-timeout (300 s) and
concurrency unless given; what is measured is how long the run waits before it ends with both tasks in `error`. The
server is then resumed (SIGCONT) and stopped, and the re-run goes to a new one (measured 2026-12-06: vLLM 0.32 did not
survive five minutes stopped; resumed, it refused connections).

The server and pytest share this machine's cores; the figures are a CPU's, not a GPU node's.
"""

from __future__ import annotations

import argparse
import importlib.util
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
sys.path.insert(0, str(REPO))

from tests.fixtures import vllm_server  # noqa: E402

TASKS = {"bias/crows_pairs_english": "suites/bias/crows_pairs_english.yaml",
         "bias/crows_pairs_french": "suites/bias/crows_pairs_french.yaml"}


def cache_rows(cache_dir: Path) -> int:
    path = cache_dir / "scores.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=30) as connection:
            return connection.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def pytest_command(url: str, work: Path, mirror: Path, pairs: int, retries: int, out: Path,
                   tasks: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--model=smollm2-135m",
            f"--server-url={url}", f"--server-retries={retries}", f"--data-dir={mirror}", f"--limit={pairs}",
            f"--baselines-dir={work / 'baselines'}", "--snapshot-update", f"--results-json={out}",
            *(TASKS[key] for key in tasks)]


def outcome(out: Path, tasks: list[str]) -> str:
    if not out.exists():
        return "no results JSON"
    said = []
    for key in tasks:
        gate = json.loads(out.read_text())["gate"][key]
        counts = gate["integrity"] or {}
        example = (counts.get("unscored_examples") or [{}])[0].get("problem", "")
        said.append(f"{key}: status {gate['status']}; {counts.get('summary')}"
                    + (f"; e.g. {example[:140]}" if example else ""))
    return " | ".join(said)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--server-retries", type=int, default=None, help="default: 1, or 4 (the product's) with --hang")
    parser.add_argument("--hang", action="store_true", help="SIGSTOP the server instead of killing it")
    args = parser.parse_args()
    if args.server_retries is None:
        args.server_retries = 4 if args.hang else 1
    tasks = list(TASKS) if args.hang else ["bias/crows_pairs_english"]
    problem = vllm_server.missing()
    if problem:
        sys.exit(problem)
    spec = importlib.util.spec_from_file_location("mirror", REPO / "scripts" / "shared_data_mirror.py")
    mirror_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mirror_module)
    with tempfile.TemporaryDirectory(prefix="modelbench-stopped-") as tmp:
        work = Path(tmp)
        mirror = mirror_module.build_mirror(work / "mirror")
        env = {**os.environ, "MODELBENCH_CACHE_DIR": str(work / "cache"), "OMP_NUM_THREADS": "1",
               "MODELBENCH_PROGRESS_INTERVAL": "0"}
        requests = 2 * args.pairs * len(tasks)
        port = vllm_server.free_port()
        with vllm_server.vllm_process(work / "vllm-1.log", port=port) as (url, process):
            print(f"vLLM up at {url}; {requests} requests ({args.pairs} pairs), --server-retries={args.server_retries}")
            out = work / "first.json"
            started = time.monotonic()
            run = subprocess.Popen(pytest_command(url, work, mirror, args.pairs, args.server_retries, out, tasks),
                                   cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            while cache_rows(work / "cache") == 0 and run.poll() is None:
                time.sleep(0.5)
            os.killpg(process.pid, signal.SIGSTOP if args.hang else signal.SIGKILL)
            stopped = time.monotonic()
            print(f"server {'stopped (SIGSTOP)' if args.hang else 'killed'} {stopped - started:.1f} s into the run, "
                  f"{cache_rows(work / 'cache')} scores cached")
            output = run.communicate(timeout=3600)[0]
            ended = time.monotonic()
            cached = cache_rows(work / "cache")
            print(f"first run: exit status {run.returncode}, ended {ended - stopped:.1f} s after the "
                  f"{'stop' if args.hang else 'kill'}; {outcome(out, tasks)}; {cached} of {requests} scores cached; "
                  f"baselines written: {sorted(p.name for p in (work / 'baselines').rglob('crows_pairs_*.json'))}")
            print("  " + next((line for line in output.splitlines() if line.startswith("FAILED")), "(no FAILED line)"))
            if args.hang:
                os.killpg(process.pid, signal.SIGCONT)  # so that it can be stopped: vLLM does not outlive a long stop
        with vllm_server.vllm_process(work / "vllm-2.log", port=port) as (url, _):
            rerun, seconds = rerun_against(url, work, mirror, args, tasks, env)
        added = cache_rows(work / "cache") - cached
        print(f"re-run: exit status {rerun.returncode} in {seconds:.1f} s; {outcome(work / 'second.json', tasks)}; it "
              f"added {added} scores to the cache, the first run left {requests - cached} unscored; baselines "
              f"written: {sorted(p.name for p in (work / 'baselines').rglob('crows_pairs_*.json'))}")
        if rerun.returncode != 0:
            print(rerun.stdout[-3000:])


def rerun_against(url: str, work: Path, mirror: Path, args, tasks: list[str], env: dict) -> tuple:
    started = time.monotonic()
    rerun = subprocess.run(pytest_command(url, work, mirror, args.pairs, args.server_retries, work / "second.json",
                                          tasks), cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    return rerun, time.monotonic() - started


if __name__ == "__main__":
    main()
