"""Quantized checkpoints of the default model: what share of ARC-Challenge answers they change against float32.

The release gate's simulations (benchmarks/gate_error_rates.py, DISCORDANCE) assume a new checkpoint answers 15% of
0/1 outcomes differently. This measures that share for real quantized copies of the same weights.

The packaged default model (SmolLM2-135M-Instruct) is loaded once, in float32, by the product's loader; every
variant is a deep copy of it with its weights rewritten in memory (fake quantization: quantize, dequantize, compute
in float32):

  bfloat16  every parameter rounded to bfloat16 and back (only the weights' precision changes)
  int8      every nn.Linear: int8, one absmax scale per output channel (row)
  q8_0      every nn.Linear: as GGUF Q8_0, blocks of 32 along the input dim, scale absmax/127 stored as float16
  q4_0      every nn.Linear: as GGUF Q4_0, blocks of 32, scale = (signed absmax)/-8, levels -8..7, float16 scale
  finetuned a light fine-tune instead (finetuned_bias.py's recipe and code: AdamW, lr 3e-5, 32 steps of 8 texts,
            seed 0), causal-LM loss on ARC-Challenge *train* questions (question text only, no answers)

Each (float32 first, the reference) is scored through the product's own path: CausalLMScorer (shared-prefix fast
path, batch size 8) driven by evaluation.evaluate_task over ARC-Challenge test (all 1,172 documents, 0-shot) with the
prompt of suites/arc_mt/arc_challenge_mt_fi.yaml, served from ../shared/data by a mirror of links in a temporary
folder. The score cache is off (cache=None), so no variant can be answered with another's scores. Printed per
variant: acc and acc_norm, their change in points, the share of documents whose acc (acc_norm) outcome changed, and
among documents where either changed, the share where both did. --json-out also keeps every per-document outcome.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/quantized_churn.py --json-out /tmp/quantized_churn.json
    ... [--variants bfloat16,int8,q8_0,q4_0,finetuned] [--limit N] [--batch-size 8]

Note the "float32" weights are the GGUF file's, dequantized: its Linear layers are Q4_1 and its (tied) token
embedding / lm_head is Q8_0. So the variants re-quantize an already 4-bit grid, and lm_head is an nn.Linear tied to
the embedding: quantizing it quantizes the input embedding too.

Measured 2026-12-02 on the 2 shared development cores, one torch thread under nice -n 5, another engineer's job on
the other core (1-minute load 0.2 to 2.3, median 1.4): 17 min 49 s end to end (load 31 s, each scoring pass 139 to
157 s, the fine-tune 158 s). Discordance: share of the 1,172 documents whose outcome changed; both/either: documents
where acc and acc_norm both changed, of those where either did.

  variant     acc %  Δ pts  acc_norm %  Δ pts  acc disc  norm disc  both/either
  float32     24.74         26.88
  bfloat16    24.74  +0.00  26.88       +0.00    0.0%      0.2%       0/2
  int8        24.74  +0.00  26.88       +0.00    1.5%      1.0%       2/28   (7.1%)
  q8_0        24.57  -0.17  27.13       +0.26    0.9%      0.8%       1/18   (5.6%)
  q4_0        24.57  -0.17  27.13       +0.26   13.0%     11.2%      46/237  (19.4%)
  finetuned   23.81  -0.94  27.30       +0.43    5.7%      4.9%      13/111  (11.7%)

Flips go both ways in nearly equal numbers (q4_0 acc: 75 gained, 77 lost), so the means barely move while up to 13%
of answers change; acc and acc_norm mostly change on different documents. The model is at chance on ARC-Challenge
(25% for 4 choices), so its answers sit between near-tied choices: a stronger model may churn less.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from pytest_modelbench.run.evaluation import evaluate_task  # noqa: E402
from pytest_modelbench.scoring.causal import CausalLMScorer  # noqa: E402
from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source  # noqa: E402
from pytest_modelbench.tasks.config import load_task_config  # noqa: E402
from pytest_modelbench.tasks.task import prepare_task  # noqa: E402

ARC_YAML = ROOT / "suites/arc_mt/arc_challenge_mt_fi.yaml"
SHARED_DATA = ROOT.parent / "shared" / "data"
METRICS = ("acc", "acc_norm")
BLOCK = 32


# --- weight variants (each returns a rewritten copy of the float32 model) -------------------------------------------


def bfloat16(model, tokenizer):
    for parameter in model.parameters():
        parameter.data = parameter.data.to(torch.bfloat16).to(torch.float32)
    return model


def int8_per_channel(w: torch.Tensor) -> torch.Tensor:
    scale = w.abs().amax(dim=1, keepdim=True) / 127
    return torch.round(w / torch.where(scale == 0, 1, scale)).clamp(-127, 127) * scale


def q8_0(w: torch.Tensor) -> torch.Tensor:
    """ggml's quantize_row_q8_0_ref: q = round(x / d), d = absmax / 127 stored as float16."""
    blocks = w.reshape(w.shape[0], -1, BLOCK)
    d = blocks.abs().amax(dim=2, keepdim=True) / 127
    q = torch.round(blocks / torch.where(d == 0, 1, d)).clamp(-127, 127)
    return (q * d.half().float()).reshape(w.shape)


def q4_0(w: torch.Tensor) -> torch.Tensor:
    """ggml's quantize_row_q4_0_ref: d = (the value of largest magnitude) / -8, q = min(15, trunc(x / d + 8.5))."""
    blocks = w.reshape(w.shape[0], -1, BLOCK)
    extreme = torch.gather(blocks, 2, blocks.abs().argmax(dim=2, keepdim=True))
    d = extreme / -8
    q = torch.floor(blocks / torch.where(d == 0, 1, d) + 8.5).clamp(0, 15)
    return ((q - 8) * d.half().float()).reshape(w.shape)


def linear_weights(quantize):
    def apply(model, tokenizer):
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.data = quantize(module.weight.data)
        return model
    return apply


def finetuned(model, tokenizer):
    from finetuned_bias import fine_tune  # benchmarks/ is this script's folder, first on sys.path

    with (SHARED_DATA / "arc_challenge_hf" / "train.jsonl").open(encoding="utf-8") as handle:
        questions = [json.loads(line)["question"] for line in handle]
    start = time.perf_counter()
    losses = fine_tune(model, tokenizer, questions, FINE_TUNE)
    print(f"finetuned: {len(losses)} steps in {time.perf_counter() - start:.0f} s, loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}", flush=True)
    return model


FINE_TUNE = {"steps": 32, "lr": 3e-5, "batch_size": 8, "seed": 0}
VARIANTS = {"bfloat16": bfloat16, "int8": linear_weights(int8_per_channel), "q8_0": linear_weights(q8_0),
            "q4_0": linear_weights(q4_0), "finetuned": finetuned}


# --- scoring through the product --------------------------------------------------------------------------------


def arc_task(workdir: Path, limit: int | None):
    from scripts.shared_data_mirror import build_mirror

    mirror = build_mirror(workdir / "mirror", SHARED_DATA)
    return prepare_task(load_task_config(ARC_YAML), data_dir=mirror, num_fewshot=0, limit=limit)


def outcomes(model, loaded, prepared, batch_size: int) -> tuple[dict[str, np.ndarray], float]:
    """Per-document 0/1 acc and acc_norm from the product's scorer (no score cache), and the seconds it took."""
    scorer = CausalLMScorer(model, loaded.tokenizer, batch_size=batch_size, fast=True, cache=None,
                            fingerprint=None, name=loaded.name, **loaded.scorer_kwargs)
    start = time.perf_counter()
    scores = evaluate_task(prepared, scorer).scores
    seconds = time.perf_counter() - start
    return {name: np.asarray(scores.per_document[name], dtype=int) for name in METRICS}, seconds


def compare(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> dict:
    changed = {name: reference[name] != candidate[name] for name in METRICS}
    either = changed["acc"] | changed["acc_norm"]
    row = {}
    for name in METRICS:
        row[name] = float(candidate[name].mean())
        row[f"{name}_delta_points"] = 100 * float(candidate[name].mean() - reference[name].mean())
        row[f"{name}_discordance"] = float(changed[name].mean())
    row["changed_either"] = int(either.sum())
    row["changed_both"] = int((changed["acc"] & changed["acc_norm"]).sum())
    row["both_changed_of_either"] = row["changed_both"] / max(1, row["changed_either"])
    return row


def print_table(reference: dict[str, np.ndarray], rows: dict[str, dict], seconds: dict[str, float]) -> None:
    print(f"\n{'variant':<10} {'acc %':>7} {'Δ pts':>6} {'acc_norm %':>10} {'Δ pts':>6} {'acc disc':>9} "
          f"{'norm disc':>9} {'both/either':>19} {'time s':>7}")
    print(f"{'float32':<10} {100 * reference['acc'].mean():7.2f} {'':>6} {100 * reference['acc_norm'].mean():10.2f}"
          f" {'':>6} {'':>9} {'':>9} {'':>19} {seconds['float32']:7.0f}")
    for name, row in rows.items():
        both = f"{row['both_changed_of_either']:.1%} ({row['changed_both']}/{row['changed_either']})"
        print(f"{name:<10} {100 * row['acc']:7.2f} {row['acc_delta_points']:+6.2f} {100 * row['acc_norm']:10.2f} "
              f"{row['acc_norm_delta_points']:+6.2f} {row['acc_discordance']:9.1%} "
              f"{row['acc_norm_discordance']:9.1%} {both:>19} {seconds[name]:7.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--limit", type=int, default=None, help="first N documents only (default: all 1,172)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown} (known: {', '.join(VARIANTS)})")

    torch.set_num_threads(1)
    start = time.perf_counter()
    prepared = arc_task(Path(tempfile.mkdtemp(prefix="modelbench-churn-")), args.limit)
    loaded = load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32")
    print(f"{len(prepared.documents)} documents; model loaded in {time.perf_counter() - start:.0f} s; "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread", flush=True)

    reference, seconds = outcomes(loaded.model, loaded, prepared, args.batch_size)
    timings = {"float32": seconds}
    print(f"float32: scored in {seconds:.0f} s", flush=True)
    per_document = {"float32": reference}
    rows = {}
    for name in names:
        model = VARIANTS[name](copy.deepcopy(loaded.model), loaded.tokenizer)
        candidate, timings[name] = outcomes(model, loaded, prepared, args.batch_size)
        per_document[name], rows[name] = candidate, compare(reference, candidate)
        print(f"{name}: scored in {timings[name]:.0f} s", flush=True)
    print_table(reference, rows, timings)
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "documents": len(prepared.documents), "doc_ids": [doc.doc_id for doc in prepared.documents],
            "variants": rows, "seconds": timings,
            "per_document": {v: {m: values.tolist() for m, values in o.items()} for v, o in per_document.items()},
        }, indent=1))


if __name__ == "__main__":
    main()
