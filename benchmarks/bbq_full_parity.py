"""BBQ on every local document: our `suites/bbq/bbq.yaml` against lm-eval 0.4.13's own `bbq`, same model and data.

    # ours (about an hour on one core), keeping the results JSON and the run record (the model's outputs):
    pytest --model smollm2-135m --dtype float32 --allow-task-code --data-dir MIRROR --score-only \\
        --results-json OURS.json --run-record OURS.record.json suites/bbq/bbq.yaml
    # lm-eval's, in its scratch venv (tests/reference/make_lmeval_bbq_full.py says how):
    python tests/reference/make_lmeval_bbq_full.py MIRROR/oskarvanderwal/bbq/All/test.jsonl LMEVAL.json
    python benchmarks/bbq_full_parity.py OURS.json OURS.record.json LMEVAL.json

Prints, overall and per category, each of the five metrics from both and their difference; then, over every
request, the largest difference between the two log-likelihoods, and the documents whose chosen continuation
differs, each with the gap between its two best continuations in lm-eval's scores (a near tie that float noise
can flip, or a real disagreement). Exits 1 when any metric differs by more than 1e-9.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

METRICS = ("acc", "accuracy_amb", "accuracy_disamb", "amb_bias_score", "disamb_bias_score")
TASK_KEY = "bbq/bbq"
TOLERANCE = 1e-9


def recorded_loglikelihoods(record: dict) -> dict[int, list[float]]:
    (variants,) = [v for key, v in record["outputs"]["tasks"].items() if key.endswith("::bbq")]
    (task,) = variants  # bbq.yaml has no group overriding it: one variant
    return {doc_id: output for doc_id, _prompt, _request, output in task["documents"]}


def metric_rows(ours: dict, lmeval: dict) -> list[tuple[str, str, float, float]]:
    rows = [("overall", metric, ours["results"][TASK_KEY][metric], lmeval["results"][metric]) for metric in METRICS]
    for category, values in sorted(lmeval["per_category"].items()):
        own = ours["categories"][TASK_KEY][category]
        rows += [(category, metric, own[metric], values[metric]) for metric in METRICS]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ours", type=Path, help="our --results-json")
    parser.add_argument("record", type=Path, help="our --run-record (holds the model's outputs)")
    parser.add_argument("lmeval", type=Path, help="tests/reference/make_lmeval_bbq_full.py's output")
    args = parser.parse_args()
    ours = json.loads(args.ours.read_text(encoding="utf-8"))
    lmeval = json.loads(args.lmeval.read_text(encoding="utf-8"))
    outputs = recorded_loglikelihoods(json.loads(args.record.read_text(encoding="utf-8")))

    print(f"lm-eval: {lmeval['provenance']['n_docs']} documents; ours: {len(outputs)} documents scored")
    print(f"{'':20} {'metric':18} {'ours':>10} {'lm-eval':>10} {'|diff|':>9}")
    worst = 0.0
    for where, metric, own, theirs in metric_rows(ours, lmeval):
        worst = max(worst, abs(own - theirs))
        print(f"{where:20} {metric:18} {own:10.6f} {theirs:10.6f} {abs(own - theirs):9.1e}")

    largest, requests, differing = 0.0, 0, []
    for document in lmeval["documents"]:
        theirs = document["loglikelihoods"]
        own = outputs[document["doc_id"]]
        largest = max(largest, max(abs(a - b) for a, b in zip(own, theirs, strict=True)))
        requests += len(theirs)
        pick_own, pick_theirs = own.index(max(own)), theirs.index(max(theirs))
        if pick_own != pick_theirs:
            best, second = sorted(theirs, reverse=True)[:2]
            differing.append((document["doc_id"], document["category"], pick_own, pick_theirs, best - second))
    print(f"log-likelihoods: {requests} compared, largest |difference| {largest:.2e} nats")
    print(f"documents whose chosen continuation differs: {len(differing)}")
    for doc_id, category, pick_own, pick_theirs, gap in differing:
        print(f"  document {doc_id} ({category}): ours picks {pick_own}, lm-eval {pick_theirs}; "
              f"lm-eval's two best are {gap:.2e} nats apart")
    subset = lmeval.get("against_lmeval_own_forward")
    if subset:
        print(f"lm-eval's reference forward against lm-eval's own HF forward ({subset['log_likelihoods']} "
              f"log-likelihoods of the 60-document subset): largest |difference| "
              f"{subset['max_abs_difference_nats']:.2e} nats")
    print(f"largest metric difference: {worst:.1e}")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
