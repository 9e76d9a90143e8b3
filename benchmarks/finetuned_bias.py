"""Real fine-tuned checkpoints of the default model, gated on CrowS-Pairs English: how their per-pair gaps move.

Makes two fine-tuned copies of the packaged default model (SmolLM2-135M-Instruct, loaded by the product's own
loader in float32) with plain torch, same recipe for both (AdamW, fixed seed, small lr, a few dozen short batches):

  biased   causal-LM loss on the CrowS-Pairs English `sent_more` sentences of `age` and `religion`, only the pairs
           with an even doc_id (the train half); the odd ones are held out
  neutral  the same number of ARC-Challenge train questions, each matched in token length to one of those sentences

Each is saved as a transformers folder (weights, config, tokenizer) under .modelbench-cache/finetuned/, named by its
recipe, and reused when it exists (--rebuild writes it again). Then each folder is gated THROUGH THE PRODUCT, as a
subprocess: `pytest --model=<folder> --dtype=float32 --baseline-name=default --data-dir=.modelbench-data suites/bias
-k crows_pairs_english --results-json ... --log-samples`, so the verdict printed is the gate's on a real checkpoint,
and the per-document log-likelihoods of that same run (--log-samples) give each pair's signed gap
ll(sent_more) - ll(sent_less), compared with the committed baseline's (+likelihood_diff when pct_stereotype is 1,
else -likelihood_diff).

Printed per checkpoint: the gate's task verdict and every entry (regressed ones marked); per category n, baseline and
candidate stereotype share, and for the per-pair change d = candidate gap - baseline gap: mean, SD, the correlation
of candidate and baseline gaps and the fit SD(d) = a + b*|baseline gap|; the two fine-tuned categories also split
into train and held-out halves; then SD(d) in bins of |baseline gap|. These are the numbers a simulation of
"per-pair likelihood differences that move as a real fine-tune's" needs (benchmarks/gate_error_rates.py).

    OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/finetuned_bias.py --json-out finetuned_bias.json
    ... [--steps 32 --lr 3e-5 --batch-size 8 --seed 0] [--rebuild] [--control]

--control adds an unchanged copy (no training) saved and gated the same way: saving and reloading should give the
baseline's gaps exactly (d = 0), so that what the others show is the fine-tune's doing.

Measured 2026-12-02 on the 2 shared development cores, with --control, at load 1.7 to 6.6 (about 4 most of the
time; other work beside it): 24 min 51 s end to end. The GGUF load 43 s; the biased fine-tune (32 steps of 8 texts)
543 s under the heaviest load, the neutral one 145 s; each gated CrowS-Pairs run 211 to 271 s. With the
checkpoints reused and their scores cached (without --control) it takes 37 s. Results: docs/measurements/finetuned-checkpoints.md,
"Real fine-tuned checkpoints (CrowS-Pairs English)".
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source

ROOT = Path(__file__).resolve().parents[1]

DATA_DIR = ROOT / ".modelbench-data"
CROWS_CSV = DATA_DIR / "jannalu/crows_pairs_multilingual/english/test.csv"
ARC_TRAIN = DATA_DIR / "allenai/ai2_arc/ARC-Challenge/train.jsonl"
BASELINE = ROOT / "baselines/default/bias/crows_pairs_english.json"
TASK_KEY = "bias/crows_pairs_english"
CACHE = ROOT / ".modelbench-cache/finetuned"
BIASED_CATEGORIES = ("age", "religion")
GAP_BINS = (0.0, 1.0, 2.5, 5.0, math.inf)  # nats of |baseline gap|


# --- training data ----------------------------------------------------------------------------------------------


def ensure_mirror() -> None:
    if not CROWS_CSV.exists() or not ARC_TRAIN.exists():
        subprocess.run([sys.executable, str(ROOT / "scripts/shared_data_mirror.py"), str(DATA_DIR)], check=True,
                       stdout=subprocess.DEVNULL)


def crows_pairs_rows() -> list[dict]:
    """The CSV's rows; a row's position is the doc_id the product gives it (and the baseline stores)."""
    with CROWS_CSV.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def is_train_pair(doc_id: int) -> bool:
    return doc_id % 2 == 0


def biased_texts(rows: list[dict]) -> list[str]:
    return [row["sent_more"] for doc_id, row in enumerate(rows)
            if row["bias_type"] in BIASED_CATEGORIES and is_train_pair(doc_id)]


def length_matched_texts(targets: list[str], pool: list[str], tokenizer) -> list[str]:
    """For each target, in order, the unused pool text closest to it in token count."""
    pool_lengths = {text: len(tokenizer.encode(text, add_special_tokens=False)) for text in dict.fromkeys(pool)}
    chosen = []
    for target in targets:
        length = len(tokenizer.encode(target, add_special_tokens=False))
        best = min(pool_lengths, key=lambda text: abs(pool_lengths[text] - length))
        chosen.append(best)
        del pool_lengths[best]
    return chosen


def arc_questions() -> list[str]:
    with ARC_TRAIN.open(encoding="utf-8") as handle:
        return [json.loads(line)["question"] for line in handle]


# --- fine-tuning ------------------------------------------------------------------------------------------------


def prefix_token_id(tokenizer) -> int:
    # The scorer puts this token before a continuation scored with an empty context (CrowS-Pairs); training on the
    # same sequences fine-tunes exactly the probabilities that are scored.
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def padded_batch(texts: list[str], tokenizer):
    prefix = prefix_token_id(tokenizer)
    encoded = [[prefix, *tokenizer.encode(text, add_special_tokens=False)] for text in texts]
    width = max(map(len, encoded))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else prefix
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in encoded])
    attention_mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in encoded])
    return input_ids, attention_mask, input_ids.masked_fill(attention_mask == 0, -100)


def batch_order(n_texts: int, steps: int, batch_size: int, seed: int) -> list[list[int]]:
    """Indices of each step's batch: seeded shuffled passes over the texts, one after another."""
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    while len(order) < steps * batch_size:
        order += torch.randperm(n_texts, generator=generator).tolist()
    return [order[step * batch_size:(step + 1) * batch_size] for step in range(steps)]


def fine_tune(model, tokenizer, texts: list[str], recipe: dict) -> list[float]:
    """Trains `model` in place; returns each step's loss."""
    torch.manual_seed(recipe["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"])
    model.train()
    losses = []
    for indices in batch_order(len(texts), recipe["steps"], recipe["batch_size"], recipe["seed"]):
        input_ids, attention_mask, labels = padded_batch([texts[i] for i in indices], tokenizer)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    return losses


def save_checkpoint(model, tokenizer, folder: Path, info: dict) -> None:
    """A plain transformers folder: the GGUF was dequantized on load, so its quantizer is dropped before saving."""
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    partial = folder.with_name(folder.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / "finetune.json").write_text(json.dumps(info, indent=2) + "\n")
    partial.rename(folder)


def checkpoint_folder(variant: str, recipe: dict) -> Path:
    if variant == "unchanged":
        return CACHE / "unchanged"
    return CACHE / f"{variant}-steps{recipe['steps']}-lr{recipe['lr']:g}-bs{recipe['batch_size']}-seed{recipe['seed']}"


def build_checkpoints(variants: list[str], recipe: dict, rebuild: bool) -> dict[str, dict]:
    """Each variant's folder and how it was made (read back from finetune.json when reused)."""
    folders = {variant: checkpoint_folder(variant, recipe) for variant in variants}
    to_build = [variant for variant, folder in folders.items() if rebuild or not folder.exists()]
    built = {}
    if to_build:
        started = time.perf_counter()
        loaded = load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32")
        print(f"loaded {DEFAULT_MODEL} (float32) in {time.perf_counter() - started:.0f} s", flush=True)
        texts = biased_texts(crows_pairs_rows())
        training = {"biased": texts, "neutral": length_matched_texts(texts, arc_questions(), loaded.tokenizer),
                    "unchanged": []}
        for variant in to_build:
            built[variant] = build_one(loaded, variant, training[variant], recipe, folders[variant])
    return {variant: built.get(variant) or json.loads((folder / "finetune.json").read_text())
            for variant, folder in folders.items()}


def build_one(loaded, variant: str, texts: list[str], recipe: dict, folder: Path) -> dict:
    model = copy.deepcopy(loaded.model)
    started = time.perf_counter()
    losses = fine_tune(model, loaded.tokenizer, texts, recipe) if texts else []
    seconds = time.perf_counter() - started
    for stale in (folder, folder.with_name(folder.name + ".partial")):
        shutil.rmtree(stale, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    info = {"variant": variant, "folder": str(folder), "recipe": recipe if texts else None, "texts": len(texts),
            "fine_tune_s": round(seconds, 1), "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None}
    save_checkpoint(model, loaded.tokenizer, folder, info)
    print(f"{variant}: {len(losses)} steps on {len(texts)} texts in {seconds:.0f} s"
          + (f", loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "") + f"; saved {folder}", flush=True)
    return info


# --- gating through the product ---------------------------------------------------------------------------------


def gate_checkpoint(folder: Path, results_json: Path) -> tuple[dict, float]:
    """The product's results JSON (with per-document samples) for the checkpoint, and the run's wall time."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--model={folder}", "--dtype=float32",
               "--baseline-name=default", f"--data-dir={DATA_DIR}", "suites/bias", "-k", "crows_pairs_english",
               f"--results-json={results_json}", "--log-samples", "-q"]
    # Scores of these checkpoints go to a cache of their own (a reused checkpoint re-gates quickly), not the user's.
    env = {**os.environ, "MODELBENCH_CACHE_DIR": str(CACHE / "score-cache")}
    started = time.perf_counter()
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if run.returncode not in (0, 1):  # 1: the gate blocked, an answer like any other
        raise SystemExit(f"pytest exited {run.returncode} for {folder}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return json.loads(results_json.read_text()), seconds


def candidate_gaps(results: dict) -> dict[int, float]:
    """doc_id -> ll(sent_more) - ll(sent_less), from the run's logged samples (choice 0 is sent_more)."""
    return {sample["doc_id"]: sample["loglikelihoods"][0] - sample["loglikelihoods"][1]
            for sample in results["samples"][TASK_KEY]}


def baseline_gaps() -> tuple[dict[int, float], dict[int, str]]:
    """doc_id -> signed gap, and doc_id -> category, from the committed baseline's per-document rows."""
    document = json.loads(BASELINE.read_text())
    columns = document["documents"]["columns"]
    rows = [dict(zip(columns, row)) for row in document["documents"]["rows"].values()]
    gaps = {row["doc_id"]: row["likelihood_diff"] if row["pct_stereotype"] == 1 else -row["likelihood_diff"]
            for row in rows}
    return gaps, {row["doc_id"]: row["category"] for row in rows}


# --- statistics -------------------------------------------------------------------------------------------------


def sd_fit(abs_gap: np.ndarray, d: np.ndarray) -> tuple[float, float]:
    """(a, b) of SD(d) = a + b*|gap|: least squares of |d - mean d| on |gap|, scaled by sqrt(pi/2), since for a
    normal d the mean absolute deviation is SD * sqrt(2/pi)."""
    b, a = np.polyfit(abs_gap, np.abs(d - d.mean()), 1)
    scale = math.sqrt(math.pi / 2)
    return float(a * scale), float(b * scale)


def group_stats(base: np.ndarray, cand: np.ndarray) -> dict:
    d = cand - base
    a, b = sd_fit(np.abs(base), d) if len(d) > 2 else (math.nan, math.nan)
    return {
        "n": len(d), "baseline_share": float(np.mean(base > 0)), "candidate_share": float(np.mean(cand > 0)),
        "mean_d": float(d.mean()), "sd_d": float(d.std(ddof=1)), "corr": float(np.corrcoef(base, cand)[0, 1]),
        "sd_fit_a": a, "sd_fit_b": b,
    }


def groups(categories: dict[int, str]) -> dict[str, list[int]]:
    """Named sets of doc_ids: all, each category, the fine-tuned categories' halves, the categories not trained on."""
    named: dict[str, list[int]] = {"(all)": sorted(categories)}
    for category in sorted(set(categories.values())):
        named[category] = [i for i in named["(all)"] if categories[i] == category]
        if category in BIASED_CATEGORIES:
            named[f"{category} train"] = [i for i in named[category] if is_train_pair(i)]
            named[f"{category} held-out"] = [i for i in named[category] if not is_train_pair(i)]
    named["(other categories)"] = [i for i in named["(all)"] if categories[i] not in BIASED_CATEGORIES]
    return named


def binned_sd(ids: list[int], base: dict[int, float], cand: dict[int, float]) -> list[dict]:
    bins = []
    for low, high in zip(GAP_BINS, GAP_BINS[1:]):
        d = [cand[i] - base[i] for i in ids if low <= abs(base[i]) < high]
        bins.append({"low": low, "high": high, "n": len(d),
                     "sd_d": float(np.std(d, ddof=1)) if len(d) > 1 else math.nan})
    return bins


def analyse(results: dict, base: dict[int, float], categories: dict[int, str]) -> dict:
    cand = candidate_gaps(results)
    if set(cand) != set(base):
        raise SystemExit(f"the run's {len(cand)} documents are not the baseline's {len(base)}")
    named = groups(categories)
    stats = {name: group_stats(np.array([base[i] for i in ids]), np.array([cand[i] for i in ids]))
             for name, ids in named.items()}
    halves = [f"{category} {half}" for half in ("train", "held-out") for category in BIASED_CATEGORIES]
    bin_groups = ["(all)", "(other categories)", *halves]
    gate = results["gate"][TASK_KEY]
    return {"gate": {"status": gate["status"], "entries": gate["entries"]}, "groups": stats,
            "sd_bins": {name: binned_sd(named[name], base, cand) for name in bin_groups}}


# --- output -----------------------------------------------------------------------------------------------------


def table(header: tuple[str, ...], rows: list[tuple]) -> str:
    cells = [header, *[tuple(str(c) for c in row) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in cells)


def report(variant: str, info: dict, analysis: dict, gate_s: float) -> str:
    gate = analysis["gate"]
    entries = [(e["metric"], e["category"] or "(all)", f"{e['baseline']:.4f}", f"{e['candidate']:.4f}",
                f"{e['delta']:+.4f}", f"{e['margin']:.4f}", f"{e['p_value']:.3g}", e["verdict"].upper()
                if e["verdict"] == "regressed" else e["verdict"]) for e in gate["entries"]]
    group_rows = [(name, s["n"], f"{s['baseline_share']:.3f}", f"{s['candidate_share']:.3f}",
                   f"{100 * (s['candidate_share'] - s['baseline_share']):+.1f}", f"{s['mean_d']:+.3f}",
                   f"{s['sd_d']:.3f}", f"{s['corr']:.3f}", f"{s['sd_fit_a']:.3f}", f"{s['sd_fit_b']:+.3f}")
                  for name, s in analysis["groups"].items()]
    bin_labels = [f"|gap| {b['low']:g}-{b['high']:g}" for b in next(iter(analysis["sd_bins"].values()))]
    bin_rows = [(name, *(f"{b['sd_d']:.3f} ({b['n']})" for b in bins)) for name, bins in analysis["sd_bins"].items()]
    made = (f"{info['texts']} texts, {info['recipe']}, fine-tune {info['fine_tune_s']} s" if info["recipe"]
            else "no training")
    return "\n".join([
        f"=== {variant}: {info['folder']} ({made}) ===",
        f"gate: {gate['status']} (pytest run {gate_s:.0f} s)",
        table(("metric", "category", "baseline", "candidate", "delta", "margin", "p", "verdict"), entries),
        "",
        "per-pair change d = candidate gap - baseline gap (nats); share = pct_stereotype; SD(d) ~ a + b*|baseline gap|",
        table(("group", "n", "base share", "cand share", "pts", "mean d", "SD d", "corr", "a", "b"), group_rows),
        "",
        "SD of d by |baseline gap| (n)",
        table(("group", *bin_labels), bin_rows),
        "",
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32, help="optimizer steps of each fine-tune (default 32)")
    parser.add_argument("--lr", type=float, default=3e-5, help="AdamW learning rate (default 3e-5)")
    parser.add_argument("--batch-size", type=int, default=8, help="texts per step (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rebuild", action="store_true", help="fine-tune again even where a checkpoint exists")
    parser.add_argument("--control", action="store_true", help="also gate an unchanged copy (save and reload only)")
    parser.add_argument("--json-out", type=Path, help="write every number printed (and each gate entry) here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    ensure_mirror()
    recipe = {"steps": args.steps, "lr": args.lr, "batch_size": args.batch_size, "seed": args.seed}
    variants = ["biased", "neutral", *(["unchanged"] if args.control else [])]
    checkpoints = build_checkpoints(variants, recipe, args.rebuild)
    base, categories = baseline_gaps()
    output = {"baseline": str(BASELINE.relative_to(ROOT)), "checkpoints": {}}
    for variant, info in checkpoints.items():
        folder = Path(info["folder"])
        results, gate_s = gate_checkpoint(folder, folder.with_name(folder.name + ".results.json"))
        analysis = analyse(results, base, categories)
        print(report(variant, info, analysis, gate_s), flush=True)
        output["checkpoints"][variant] = {**info, "gate_run_s": round(gate_s, 1), **analysis}
    output["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"wall time {output['wall_s']:.0f} s")
    if args.json_out:
        args.json_out.write_text(json.dumps(output, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
