"""--early-stop on real fine-tuned checkpoints: the bias suite gated with and without it, through pytest.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/early_stop_checkpoints.py [--json-out PATH] [FOLDER ...]

The checkpoints are benchmarks/finetuned_bias.py's (run it first: it builds them under .modelbench-cache/finetuned/):
the default model fine-tuned on stereotype-confirming CrowS-Pairs sentences of two categories (biased) and on neutral
ARC questions (neutral). Each is gated on suites/bias against the committed baselines twice, each time as a fresh
pytest process: first with --early-stop and an empty score cache of its own (its wall time is what early stopping
costs), then without it on the same cache, which then computes the documents the first run left (its wall time is
not a full run's), then with --early-stop --early-stop-verdicts on that cache (every score cached: its documents
scored are what it would compute). Printed per checkpoint and task: each run's gate status, the documents scored (the
early runs' `n_documents`), whether the decision (blocked or not) and the verdict are the full run's, the early
runs' notes; and the first two runs' wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / ".modelbench-data"
FINETUNED = ROOT / ".modelbench-cache" / "finetuned"


def gate(folder: Path, results_json: Path, cache: Path, *options: str) -> tuple[dict, float]:
    """The results JSON's gate outcomes of suites/bias for the checkpoint, and the run's wall time."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--model={folder}", "--dtype=float32",
               "--baseline-name=default", f"--data-dir={DATA_DIR}", "suites/bias",
               f"--results-json={results_json}", "-q", *options]
    started = time.perf_counter()
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "MODELBENCH_CACHE_DIR": str(cache)})
    seconds = time.perf_counter() - started
    if run.returncode not in (0, 1):  # 1: the gate blocked, an answer like any other
        raise SystemExit(f"pytest exited {run.returncode} for {folder}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return json.loads(results_json.read_text())["gate"], seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="checkpoint folders (default: the fine-tuned ones)")
    parser.add_argument("--json-out", type=Path, help="also write the outcomes and times here")
    args = parser.parse_args()
    folders = args.folders or sorted(p for p in FINETUNED.glob("*-steps*") if p.is_dir())
    if not folders:
        raise SystemExit(f"no checkpoints in {FINETUNED}: run benchmarks/finetuned_bias.py first")
    report = {}
    for folder in folders:
        cache = ROOT / ".modelbench-cache" / "early-stop-cache" / folder.name
        shutil.rmtree(cache, ignore_errors=True)
        early, early_s = gate(folder, ROOT / ".modelbench-cache" / "early.json", cache, "--early-stop")
        full, full_s = gate(folder, ROOT / ".modelbench-cache" / "full.json", cache)
        verdicts, _ = gate(folder, ROOT / ".modelbench-cache" / "verdicts.json", cache, "--early-stop",
                           "--early-stop-verdicts")
        print(f"=== {folder.name}: --early-stop {early_s:.0f} s from an empty cache; then the full run {full_s:.0f} s "
              "on its cache")
        scored = scored_verdicts = total = 0
        for task in sorted(full):
            e, v, f = early[task], verdicts[task], full[task]
            scored, total = scored + e["n_documents"], total + f["n_documents"]
            scored_verdicts += v["n_documents"]
            same = (e["status"] == "regressed") == (f["status"] == "regressed")
            print(f"  {task}: full {f['status']} ({f['n_documents']}), early {e['status']} ({e['n_documents']}); "
                  f"same decision: {same}; {e['note'] or 'scored in full'}")
            print(f"    --early-stop-verdicts {v['status']} ({v['n_documents']}); same verdict: "
                  f"{v['status'] == f['status']}; {v['note'] or 'scored in full'}")
        print(f"  documents scored: {scored} of {total} ({100 * scored / total:.1f}%); with --early-stop-verdicts "
              f"{scored_verdicts} ({100 * scored_verdicts / total:.1f}%)")
        report[folder.name] = {"early": early, "full": full, "verdicts": verdicts, "early_s": early_s,
                               "full_s": full_s}
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
