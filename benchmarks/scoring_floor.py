"""The main job's arithmetic floor: how long its matrix products alone take on this machine.

    python benchmarks/scoring_floor.py --data-dir MIRROR [--suite suites/bias] [--threads N]

The fast path (scoring/prefix_sharing.py) runs every token of its plan through the model's body once and the output
embedding at each distinct scored position once. This script builds those plans from the suite's real requests
(tokenizer only; no scoring), counts the multiply-accumulates of the model's linear layers they need, times this
machine's float32 matrix products at the model's own weight shapes, and prints the quotient: a lower bound for any
run that computes the same numbers, before attention, normalisation, log-softmax, loading and the gate. Compare it
with `main_job_time.py`'s wall times.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ROWS_PER_PRODUCT = 4096  # tokens per timed product: about one `auto` batch of the bias suite


@dataclass(frozen=True)
class PlanWork:
    task: str
    requests: int
    input_tokens: int  # the requests' model inputs, as the plain path computes them
    body_tokens: int  # tokens the fast path runs through the body (shared prefix + packed rows)
    scored_positions: int  # distinct positions where it applies the output embedding


def plan_work(task: str, inputs: list[tuple[int, ...]], continuations: list[tuple[int, ...]]) -> PlanWork:
    from pytest_modelbench.scoring.prefix_sharing import plan_requests

    plan = plan_requests(inputs, [len(c) for c in continuations])
    scored = set()
    for row, slots in zip(plan.request_row, plan.scored_slots):
        scored.update((row, slot) if slot >= 0 else (-1, slot) for slot in slots)
    return PlanWork(task, len(inputs), sum(map(len, inputs)),
                    len(plan.prefix) + sum(len(row) for row in plan.rows), len(scored))


def suite_work(suite: Path, data_dir: Path, scorer) -> list[PlanWork]:
    """The plans' work for each task of the suite, from the requests as `scorer` (a CausalLMScorer) encodes them."""
    from pytest_modelbench.tasks.config import is_task_file, load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    work = []
    for path in sorted(p for p in suite.glob("*.yaml") if is_task_file(p)):
        config = load_task_config(path)
        prepared = prepare_task(config, data_dir=data_dir)
        requests = [(doc.context, cont) for doc in prepared.documents for cont in doc.continuations]
        rows = [scorer._model_input(r) for r in scorer.encoder.encode_pairs(requests)]
        work.append(plan_work(config.task, [inp for inp, _ in rows], [cont for _, cont in rows]))
    return work


def linear_shapes(model) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """(out, in) of every linear layer of the body, and of the output embedding."""
    head = model.get_output_embeddings()
    body = [tuple(m.weight.shape) for m in model.base_model.modules() if isinstance(m, torch.nn.Linear)]
    return body, tuple(head.weight.shape)


def seconds_per_token(shapes: list[tuple[int, int]], repeats: int = 5) -> float:
    """Time of the products of one token through these weight shapes, measured on ROWS_PER_PRODUCT-token products."""
    total = 0.0
    for out_features, in_features in set(shapes):
        x, w = torch.randn(ROWS_PER_PRODUCT, in_features), torch.randn(out_features, in_features)
        F.linear(x, w)
        F.linear(x, w)
        started = time.perf_counter()
        for _ in range(repeats):
            F.linear(x, w)
        total += shapes.count((out_features, in_features)) * (time.perf_counter() - started) / repeats
    return total / ROWS_PER_PRODUCT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--suite", default=REPO / "suites" / "bias", type=Path)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    args = parser.parse_args()
    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    if args.threads:
        torch.set_num_threads(args.threads)

    loaded = load_model(resolve_model_source(args.model), dtype="float32")
    body, head = linear_shapes(loaded.model)
    work = suite_work(args.suite, args.data_dir, CausalLMScorer(loaded.model, loaded.tokenizer))
    del loaded  # the products are timed with only their own operands in memory
    body_macs, head_macs = sum(o * i for o, i in body), head[0] * head[1]
    body_s, head_s = seconds_per_token(body), seconds_per_token([head])

    print(f"model {args.model}: {body_macs / 1e6:.1f}M MAC per token in the body, {head_macs / 1e6:.1f}M in the "
          f"output embedding; {torch.get_num_threads()} torch threads; products at "
          f"{body_macs / body_s / 1e9:.0f} and {head_macs / head_s / 1e9:.0f} GMAC/s")
    print(f"{'task':<26} {'requests':>8} {'input tok':>9} {'body tok':>9} {'scored':>8} {'TMAC':>6} {'floor':>7}")
    total_macs = total_seconds = 0.0
    for w in work:
        macs = w.body_tokens * body_macs + w.scored_positions * head_macs
        seconds = w.body_tokens * body_s + w.scored_positions * head_s
        total_macs += macs
        total_seconds += seconds
        print(f"{w.task:<26} {w.requests:>8} {w.input_tokens:>9} {w.body_tokens:>9} {w.scored_positions:>8} "
              f"{macs / 1e12:>6.2f} {seconds:>6.0f}s")
    minutes, rest = divmod(total_seconds, 60)
    print(f"{'all':<26} {'':>8} {'':>9} {'':>9} {'':>8} {total_macs / 1e12:>6.2f} {total_seconds:>6.0f}s"
          f"  = {int(minutes)} min {rest:.0f} s of matrix products, the floor of any run with these numbers")


if __name__ == "__main__":
    main()
