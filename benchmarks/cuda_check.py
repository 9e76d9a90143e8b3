"""The default model on a CUDA device against the CPU figures: local path in float32 and bfloat16, and sharded.

    python benchmarks/cuda_check.py [--crows-pairs 150] [--arc-docs 40] [--device cuda]
    python benchmarks/cuda_check.py --device cpu --crows-pairs 5 --arc-docs 3     # smoke check without a GPU

Scores CrowS-Pairs English (2 requests a pair) and ARC-Challenge in the arc_mt schema (Finnish, 4 requests a
document, 0-shot) with the packaged SmolLM2-135M: first on the CPU in float32 with lm-eval's procedure (the plain
path, batch size 1: the CPU figures), then on `--device` in these configurations, each printed as the largest |Δ| of
its log-likelihoods from the CPU figures and the per-document verdicts (acc, acc_norm, pct_stereotype) that changed:

- float32 plain and fast path, batch size 8;
- bfloat16 fast path, batch size 8 (8 bits of mantissa: on the CPU |Δ| reaches 1.0 on CrowS-Pairs sentences, so
  expect flipped near-ties);
- float32 sharded: `--model-args device_map=auto` with `max_memory` giving the device 40% of the weights, the CPU 30%
  and the rest offloaded to disk (layers on cpu and disk run on the device: accelerate's rule), fast path.

Without a CUDA device (and `--device cuda`, the default) it says so and exits 0. Data: a dataset mirror built from
../shared/data (`--shared-data`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VERDICTS = ("acc", "acc_norm", "pct_stereotype")
TASKS = {"crows_pairs_english": "bias/crows_pairs_english.yaml",
         "arc_challenge_mt_fi": "arc_mt/arc_challenge_mt_fi.yaml"}


def prepared_tasks(mirror: Path, limits: dict[str, int]):
    from pytest_modelbench.tasks.config import load_task_config
    from pytest_modelbench.tasks.task import prepare_task

    return [prepare_task(load_task_config(REPO / "suites" / path), data_dir=mirror, num_fewshot=0, limit=limits[name])
            for name, path in TASKS.items()]


def score(loaded, tasks, **scorer_kwargs) -> dict[str, tuple[list[float], dict[str, list[float]]]]:
    """Per task: the flat log-likelihoods and the per-document metric values."""
    from pytest_modelbench.run.evaluation import evaluate_task
    from pytest_modelbench.scoring.causal import CausalLMScorer

    scorer = CausalLMScorer(loaded.model, loaded.tokenizer, **scorer_kwargs)
    results = {}
    for prepared in tasks:
        evaluation = evaluate_task(prepared, scorer)
        flat = [value for document in evaluation.loglikelihoods for value in document]
        results[prepared.config.task] = (flat, {k: list(v) for k, v in evaluation.scores.per_document.items()})
    return results


def compare(label: str, figures, cpu, seconds: float) -> None:
    for task, (values, verdicts) in figures.items():
        reference_values, reference_verdicts = cpu[task]
        largest = max(abs(a - b) for a, b in zip(values, reference_values))
        changed = sum(a != b for metric in VERDICTS if metric in verdicts
                      for a, b in zip(verdicts[metric], reference_verdicts[metric]))
        print(f"{label:<22} {task:<22} n={len(values):<5} max|Δll|={largest:.3g}  verdicts changed={changed}"
              f"  ({seconds:.1f} s)", flush=True)


def sharded_model_args(loaded, device: str, offload: Path) -> str:
    """device_map=auto with max_memory: the device holds 40% of the float32 weights, the CPU 30%, disk the rest."""
    import torch

    size = sum(p.numel() * 4 for p in loaded.model.parameters())
    if device == "cpu":
        limits = f"cpu:{int(size * 0.5)}"
    else:
        index = torch.device(device).index or 0
        limits = f"{index}:{int(size * 0.4)};cpu:{int(size * 0.3)}"
    return f"device_map=auto,max_memory={limits},offload_folder={offload}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu for a smoke check (default cuda)")
    parser.add_argument("--crows-pairs", type=int, default=150, help="CrowS-Pairs pairs (2 requests each)")
    parser.add_argument("--arc-docs", type=int, default=40, help="ARC documents (4 requests each)")
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("cuda_check: no CUDA device here; nothing to check (run it where a GPU is available, or --device cpu "
              "for a smoke check)")
        return 0
    from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source
    from scripts.shared_data_mirror import build_mirror

    with tempfile.TemporaryDirectory() as tmp:
        tasks = prepared_tasks(build_mirror(Path(tmp) / "mirror", args.shared_data),
                               {"crows_pairs_english": args.crows_pairs, "arc_challenge_mt_fi": args.arc_docs})
        print(f"device: {torch.cuda.get_device_name(args.device) if args.device.startswith('cuda') else 'cpu'}; "
              f"torch {torch.__version__}", flush=True)
        started = time.perf_counter()
        cpu_model = load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32", device="cpu")
        cpu = score(cpu_model, tasks, batch_size=1)
        compare("cpu float32 plain", cpu, cpu, time.perf_counter() - started)
        runs = [
            ("float32 plain", "", "float32", False),
            ("float32 fast", "", "float32", True),
            ("bfloat16 fast", "", "bfloat16", True),
            ("float32 sharded fast", sharded_model_args(cpu_model, args.device, Path(tmp) / "offload"), "float32",
             True),
        ]
        del cpu_model
        for label, model_args, dtype, fast in runs:
            started = time.perf_counter()
            loaded = load_model(resolve_model_source(DEFAULT_MODEL, model_args or None), dtype=dtype,
                                device=args.device)
            if model_args:
                placed = sorted({str(v) for v in getattr(loaded.model, "hf_device_map", {"": args.device}).values()})
                label = f"{label} [{'+'.join(placed)}]"
            compare(label, score(loaded, tasks, batch_size=8, fast=fast), cpu, time.perf_counter() - started)
            del loaded
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
