"""The same tasks scored through a vLLM server on this CPU and through the local path, side by side.

    python benchmarks/server_vs_local.py [--crows-pairs 1508] [--arc-docs 300] [--sweep-pairs 200] [--gen-docs 40]
                                         [--ppl-docs 40] [--only-new]
    python benchmarks/server_vs_local.py --server-url http://node:8000/v1      # a server already running

Scores CrowS-Pairs English and ARC-Challenge in the arc_mt schema (Finnish, 0-shot) with the packaged SmolLM2-135M:
locally in float32 (the plain path at batch size 1, lm-eval's procedure: the reference; and the fast path at batch
size 8), then through the server backend. Prints requests/s of each, the server's largest |Δ| from the local
log-likelihoods (absolute, and relative to |ll|) and the per-document verdicts that changed; then the effect of
requests in flight (`--server-concurrency`) and prompts per request (`--batch-size`) on a `--sweep-pairs` subset.
Then the generative and rolling output types: suites/arc_gen's three generate_until tasks (`--gen-docs` documents
each; greedy answers compared document by document with the local path's at batch size 1, a differing answer
explained by the local log-probability gap at the first differing token) and suites/perplexity
(loglikelihood_rolling, `--ppl-docs` texts, at the suite's windows and at max_length 16, where every text spans
several windows: largest |Δ| from the local values). `--only-new` runs only these.
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
    from pytest_modelbench.run.evaluation import evaluate_task

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


def generative_tasks(mirror: Path, documents: int):
    from pytest_modelbench.tasks.config import load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    return [prepare_task(load_task_config(path), data_dir=mirror, limit=documents)
            for path in sorted((REPO / "suites" / "arc_gen").glob("*.yaml"))]


def rolling_task(mirror: Path, documents: int):
    from pytest_modelbench.tasks.config import load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    return prepare_task(load_task_config(REPO / "suites" / "perplexity" / "arc_challenge_question_ppl.yaml"),
                        data_dir=mirror, limit=documents)


def generate(backend, tasks):
    """Per task: the answers and the seconds it took."""
    results = {}
    for prepared in tasks:
        started = time.perf_counter()
        results[prepared.config.task] = (backend.generate_task(prepared), time.perf_counter() - started)
    return results


def first_difference_gap(model, context, served_ids) -> float | None:
    """The local log-probability of the local greedy token minus that of the server's, where they first differ."""
    import torch

    ids = list(context)
    with torch.inference_mode():
        for token in served_ids:
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
            best = int(torch.argmax(logprobs))
            if best != token:
                return float(logprobs[best] - logprobs[token])
            ids.append(token)
    return None


def report_generation(local, served, tasks, backend, model) -> None:
    for prepared in tasks:
        task = prepared.config.task
        (ours, served_s), (theirs, local_s) = served[task], local[task]
        differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
        gaps = [first_difference_gap(model, backend.encoder.encode(prepared.documents[i].context),
                                     backend.last_token_ids[i]) if i in backend.last_token_ids else None
                for i in differ]
        print(f"    {task:<30} {len(ours)} documents  local {len(ours) / local_s:5.2f} docs/s  server "
              f"{len(ours) / served_s:5.2f} docs/s  equal {len(ours) - len(differ)}/{len(ours)}"
              + "".join(f"\n      document {prepared.documents[i].doc_id}: served {ours[i]!r}, local {theirs[i]!r}, "
                        f"local log-probability gap at the first differing token {gap}"
                        for i, gap in zip(differ, gaps)), flush=True)


def rolling(backend, prepared):
    started = time.perf_counter()
    values = backend.rolling_loglikelihood_task(prepared)
    return values, time.perf_counter() - started


def report_rolling(label, values, seconds, reference) -> None:
    absolute = max(abs(a - b) for a, b in zip(values, reference))
    relative = max(abs(a - b) / max(abs(b), 1e-9) for a, b in zip(values, reference))
    print(f"    {label:<34} {len(values)} texts  {len(values) / seconds:6.1f} texts/s  max|Δll| {absolute:.2e}  "
          f"max|Δll|/|ll| {relative:.2e}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-url", default=None, help="a running OpenAI-compatible server (default: start vLLM)")
    parser.add_argument("--crows-pairs", type=int, default=1508)
    parser.add_argument("--arc-docs", type=int, default=300)
    parser.add_argument("--sweep-pairs", type=int, default=200, help="CrowS pairs for the concurrency sweep")
    parser.add_argument("--gen-docs", type=int, default=40, help="documents per suites/arc_gen task")
    parser.add_argument("--ppl-docs", type=int, default=40, help="suites/perplexity texts")
    parser.add_argument("--only-new", action="store_true", help="only the generate_until and rolling comparison")
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()

    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, load_tokenizer, resolve_model_source
    from pytest_modelbench.scoring.server.scorer import connect
    from scripts.shared_data_mirror import build_mirror
    from tests.fixtures import vllm_server

    with tempfile.TemporaryDirectory() as tmp:
        mirror = build_mirror(Path(tmp) / "mirror", args.shared_data)
        tasks = prepared_tasks(mirror, {"crows_pairs_english": args.crows_pairs, "arc_challenge_mt_fi": args.arc_docs})
        generative, perplexity = generative_tasks(mirror, args.gen_docs), rolling_task(mirror, args.ppl_docs)
        loaded = load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32")
        if not args.only_new:
            plain, seconds = evaluate(CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=1), tasks)
            report("local plain, batch 1 (reference)", plain, seconds)
            fast, seconds = evaluate(CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=8, fast=True), tasks)
            report("local fast, batch 8", fast, seconds, plain)
        local_scorer = CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=1)
        local_generations = generate(local_scorer, generative)
        local_rolling = rolling(local_scorer, perplexity)
        local_windowed = rolling(CausalLMScorer(loaded.model, loaded.tokenizer, batch_size=1, max_length=16),
                                 perplexity)

        tokenizer = load_tokenizer(resolve_model_source(DEFAULT_MODEL))
        server = nullcontext(args.server_url) if args.server_url else vllm_server.vllm_server(Path(tmp) / "vllm.log")
        started = time.perf_counter()
        with server as url:
            print(f"server {url} answering after {time.perf_counter() - started:.0f} s", flush=True)
            backend = connect([url], tokenizer=tokenizer, name=DEFAULT_MODEL, concurrency=8, batch_size=8)
            if not args.only_new:
                served, seconds = evaluate(backend, tasks)
                report("server, 8 in flight, 8 per request", served, seconds, plain)

            print("generate_until (suites/arc_gen), server 8 in flight, 8 per request, against the local path "
                  "(batch 1):", flush=True)
            report_generation(local_generations, generate(backend, generative), generative, backend, loaded.model)
            print("loglikelihood_rolling (suites/perplexity), server 8 in flight, 8 per request:", flush=True)
            values, seconds = rolling(backend, perplexity)
            print(f"    local path (batch 1): {len(values) / local_rolling[1]:.1f} texts/s", flush=True)
            report_rolling("server, suite windows", values, seconds, local_rolling[0])
            windowed = connect([url], tokenizer=tokenizer, name=DEFAULT_MODEL, concurrency=8, batch_size=8,
                               scorer_kwargs={"max_length": 16})
            values, seconds = rolling(windowed, perplexity)
            report_rolling("server, max_length 16", values, seconds, local_windowed[0])
            if args.only_new:
                return 0

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
