"""The same tasks scored through a vLLM server on this CPU and through the local path, side by side.

    python benchmarks/server_vs_local.py [--crows-pairs 1508] [--arc-docs 300] [--sweep-pairs 200]
    python benchmarks/server_vs_local.py --server-url http://node:8000/v1      # a server already running

Scores CrowS-Pairs English and ARC-Challenge in the arc_mt schema (Finnish, 0-shot) with the packaged SmolLM2-135M:
locally in float32 (the plain path at batch size 1, lm-eval's procedure: the reference; and the fast path at batch
size 8), then through the server backend. Prints requests/s of each, the server's largest |Δ| from the local
log-likelihoods (absolute, and relative to |ll|) and the per-document verdicts that changed; then the effect of
requests in flight (`--server-concurrency`) and prompts per request (`--batch-size`) on a `--sweep-pairs` subset.
Without `--server-url` it starts vLLM from scripts/setup-vllm.sh's venv (tests/fixtures/vllm_server.py). The score
cache is off throughout. On a 2-core machine the server and this process share the cores: the server's figures are
what one core of vLLM does, not what a GPU node does.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cuda_check import VERDICTS, prepared_tasks  # noqa: E402


def evaluate(backend, tasks):
    """Per task: flat log-likelihoods and per-document metric values; and the seconds it took."""
    from pytest_modelbench.evaluation import evaluate_task

    started = time.perf_counter()
    results = {}
    for prepared in tasks:
        evaluation = evaluate_task(prepared, backend)
        results[prepared.config.task] = ([v for lls in evaluation.loglikelihoods for v in lls],
                                         {k: list(v) for k, v in evaluation.scores.per_document.items()})
    return results, time.perf_counter() - started


def report(label: str, figures, seconds: float, reference=None) -> None:
    requests = sum(len(values) for values, _ in figures.values())
    line = f"{label:<34} {requests:>5} requests  {requests / seconds:7.1f} requests/s"
    if reference is not None:
        for task, (values, verdicts) in figures.items():
            ref_values, ref_verdicts = reference[task]
            absolute = max(abs(a - b) for a, b in zip(values, ref_values))
            relative = max(abs(a - b) / max(abs(b), 1e-9) for a, b in zip(values, ref_values))
            changed = sum(a != b for m in VERDICTS if m in verdicts for a, b in zip(verdicts[m], ref_verdicts[m]))
            line += f"\n    {task:<22} max|Δll| {absolute:.2e}  max|Δll|/|ll| {relative:.2e}  verdicts changed {changed}"
    print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-url", default=None, help="a running OpenAI-compatible server (default: start vLLM)")
    parser.add_argument("--crows-pairs", type=int, default=1508)
    parser.add_argument("--arc-docs", type=int, default=300)
    parser.add_argument("--sweep-pairs", type=int, default=200, help="CrowS pairs for the concurrency sweep")
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()

    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, load_tokenizer, resolve_model_source
    from pytest_modelbench.scoring.server.scorer import connect
    from scripts.shared_data_mirror import build_mirror
    from tests.fixtures import vllm_server

    with tempfile.TemporaryDirectory() as tmp:
        tasks = prepared_tasks(build_mirror(Path(tmp) / "mirror", args.shared_data),
                               {"crows_pairs_english": args.crows_pairs, "arc_challenge_mt_fi": args.arc_docs})
        loaded = load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32")
        plain, seconds = evaluate(CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=1), tasks)
        report("local plain, batch 1 (reference)", plain, seconds)
        fast, seconds = evaluate(CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=8, fast=True), tasks)
        report("local fast, batch 8", fast, seconds, plain)
        del loaded

        tokenizer = load_tokenizer(resolve_model_source(DEFAULT_MODEL))
        server = nullcontext(args.server_url) if args.server_url else vllm_server.vllm_server(Path(tmp) / "vllm.log")
        started = time.perf_counter()
        with server as url:
            print(f"server {url} answering after {time.perf_counter() - started:.0f} s", flush=True)
            backend = connect([url], tokenizer=tokenizer, name=DEFAULT_MODEL, concurrency=8, batch_size=8)
            served, seconds = evaluate(backend, tasks)
            report("server, 8 in flight, 8 per request", served, seconds, plain)

            crows = dataclasses.replace(tasks[0], documents=tasks[0].documents[: args.sweep_pairs])
            sweep_reference = {crows.config.task: (plain[crows.config.task][0][: 2 * args.sweep_pairs], {
                m: v[: args.sweep_pairs] for m, v in plain[crows.config.task][1].items()})}
            for concurrency, per_request in ((1, 1), (4, 1), (1, 8), (4, 8), (8, 8), (16, 16)):
                backend = connect([url], tokenizer=tokenizer, name=DEFAULT_MODEL, concurrency=concurrency,
                                  batch_size=per_request)
                figures, seconds = evaluate(backend, [crows])
                report(f"server, {concurrency} in flight, {per_request} per request", figures, seconds,
                       sweep_reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
