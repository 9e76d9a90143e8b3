"""generate_until side by side: lm-eval 0.4.13's HFLM.generate_until and pytest-modelbench's causal backend on the
same prompts (suites/arc_gen, the first N validation questions of each task), same model, float32, same batch size.

    python benchmarks/generation_vs_lmeval.py --data-dir MIRROR [--docs 40] [--batch-size 1] [--threads 1]

lm-eval runs in its own virtual environment (--lmeval-python, or $MODELBENCH_LMEVAL_PYTHON) through
benchmarks/_lmeval_worker.py; each side loads the default model (SmolLM2-135M-Instruct GGUF, dequantized). Prints per
task both wall times for generation only (no loading), the ratio lm-eval / ours, and how many answers differ.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_vs_lmeval import DEFAULT_LMEVAL_PYTHON, LmEvalWorker  # noqa: E402

TASKS = ("arc_challenge_letter", "arc_challenge_letter_3shot")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a mirror from scripts/shared_data_mirror.py")
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lmeval-python", default=os.environ.get("MODELBENCH_LMEVAL_PYTHON", DEFAULT_LMEVAL_PYTHON))
    args = parser.parse_args()

    import torch

    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source
    from pytest_modelbench.tasks.config import load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    torch.set_num_threads(args.threads)
    source = resolve_model_source(DEFAULT_MODEL)
    loaded = load_model(source, dtype="float32")
    scorer = CausalLMScorer(loaded.model, loaded.tokenizer, generation_batch_size=args.batch_size)
    worker = LmEvalWorker(args.lmeval_python)
    try:
        worker.call(cmd="load", pretrained=source.location, gguf_file=source.gguf_file,
                    dtype="float32", batch_size=args.batch_size, device="cpu", threads=args.threads)
        print(f"{'task':28}  {'docs':>4}  {'lm-eval s':>9}  {'ours s':>7}  {'ratio':>6}  differing answers")
        for task in TASKS:
            config = load_task_config(REPO / "suites" / "arc_gen" / f"{task}.yaml")
            prepared = prepare_task(config, data_dir=args.data_dir, limit=args.docs)
            kwargs = {"until": list(config.generation.until), "max_gen_toks": config.generation.max_gen_toks,
                      "do_sample": False, "temperature": 0.0}
            theirs = worker.call(cmd="generate", requests=[[doc.context, kwargs] for doc in prepared.documents])
            start = time.perf_counter()
            ours = scorer.generate_task(prepared)
            seconds = time.perf_counter() - start
            differing = sum(a != b for a, b in zip(ours, theirs["generations"]))
            print(f"{task:28}  {len(ours):>4}  {theirs['seconds']:>9.1f}  {seconds:>7.1f}  "
                  f"{theirs['seconds'] / seconds:>6.2f}  {differing}")
    finally:
        worker.close()


if __name__ == "__main__":
    main()
