"""What the model's outputs add to a run record (--rescore-from, scoring/replay.py), per task of a suite.

    python benchmarks/record_outputs_size.py --data-dir MIRROR [--suite suites/bias] [--seed 0]

Each task is prepared as a run prepares it (data from the mirror; no model), and its documents are given outputs of
the shape a run records: one log-likelihood per choice (multiple_choice), a log-likelihood and a greedy flag
(loglikelihood), one log-likelihood (loglikelihood_rolling), drawn as doubles of a real run's magnitude, or for
generate_until a generation of `--generation-chars` characters. It prints, per task, the documents, the requests and
the bytes its outputs add to the record (as the record's JSON text writes them: outputs/results.py, json_text), and
the bytes per document.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    from pytest_modelbench.outputs.results import json_text
    from pytest_modelbench.scoring.replay import task_outputs
    from pytest_modelbench.tasks.config import is_task_file, load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--suite", type=Path, default=REPO / "suites" / "bias")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generation-chars", type=int, default=200)
    args = parser.parse_args()
    draw = random.Random(args.seed)
    total_docs = total_bytes = 0
    print(f"{'task':32} {'docs':>6} {'requests':>8} {'bytes':>10} {'bytes/doc':>9}")
    for path in sorted(p for p in args.suite.rglob("*.yaml") if is_task_file(p)):
        prepared = prepare_task(load_task_config(path), data_dir=args.data_dir.resolve())
        documents = prepared.documents
        loglikelihoods = [[-draw.uniform(2, 80) for _ in doc.continuations or [doc.gold]] for doc in documents]
        generations = ["x" * args.generation_chars for _ in documents]
        greedy = [draw.random() < 0.5 for _ in documents]
        outputs = task_outputs(prepared, loglikelihoods, generations, greedy)
        size = len(json_text({"tasks": {"key": [outputs]}}).encode("utf-8"))
        requests = sum(len(values) for values in loglikelihoods)
        print(f"{prepared.config.task:32} {len(documents):6} {requests:8} {size:10} {size / len(documents):9.1f}")
        total_docs, total_bytes = total_docs + len(documents), total_bytes + size
    print(f"{'all':32} {total_docs:6} {'':8} {total_bytes:10} {total_bytes / max(total_docs, 1):9.1f}")


if __name__ == "__main__":
    main()
