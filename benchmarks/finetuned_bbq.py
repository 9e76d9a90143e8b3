"""A checkpoint fine-tuned towards BBQ's stereotyped answers in two categories, gated on bbq_sample: is it flagged in
exactly those categories? And does the default model scored again at another batch size pass?

Makes one fine-tuned copy of the packaged default model (SmolLM2-135M-Instruct, float32) with finetuned_bias.py's
recipe (AdamW, fixed seed, small lr, a few dozen batches of 8), trained with the causal-LM loss on BBQ prompts
answered with their stereotyped answer, `{context}\\n\\nQ: {question}\\nA: {biased answer}`, from the documents of
BIASED_CATEGORIES that are NOT in the sample (other name/group variants of the same templates: the gate sees how the
fine-tune carries over, never the trained texts). Saved under .modelbench-cache/finetuned/ and reused when it exists.
Then gated THROUGH THE PRODUCT as a subprocess against the committed baseline:
`pytest --model=<folder> --dtype=float32 --allow-task-code --baseline-name=default --data-dir=... \\
suites/bbq/bbq_sample.yaml --results-json=...`, and the default model itself the same way at --batch-size 1 (the
baseline was recorded at the default batch size) from an empty score cache of its own.

Printed per run: the gate's task status, every regressed or improved entry, and the categories with a regressed
entry against those fine-tuned.

    OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/finetuned_bbq.py [--data-dir .modelbench-data]
    ... [--runs biased batch1] [--steps 32 --lr 5e-5 --batch-size 8 --seed 0] [--rebuild]

Measured 2026-12-06 (results: docs/benchmarks.md, "A checkpoint fine-tuned towards BBQ's stereotyped answers"):
the batch-size-1 run passes; the fine-tuned checkpoint is flagged, on accuracy_amb in five categories and overall,
not in exactly Age and Religion.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from finetuned_bias import fine_tune, save_checkpoint  # benchmarks/ is this script's folder, first on sys.path
from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".modelbench-cache/finetuned"
TASK_KEY = "bbq/bbq_sample"
BIASED_CATEGORIES = ("Age", "Religion")
BBQ_FILE = "oskarvanderwal/bbq/All/test.jsonl"


def bbq_utils():
    spec = importlib.util.spec_from_file_location("bbq_utils", ROOT / "suites/bbq/utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def training_texts(data_dir: Path) -> list[str]:
    """The BIASED_CATEGORIES' documents outside the sample, each answered with its (first) stereotyped answer."""
    utils = bbq_utils()
    rows = [json.loads(line) for line in (data_dir / BBQ_FILE).read_text(encoding="utf-8").splitlines()]
    in_sample = utils.sampled_variants(rows)
    texts = []
    for row in rows:
        if row["category"] not in BIASED_CATEGORIES or utils.variant_key(row) in in_sample:
            continue
        biased = utils.biased_answers(row)
        if biased:
            texts.append(f"{row['context']}\n\nQ: {row['question']}\nA: {biased[0]}")
    return texts


def build_biased(recipe: dict, data_dir: Path, rebuild: bool) -> Path:
    folder = CACHE / ("bbq-biased-" + "-".join(BIASED_CATEGORIES).lower()
                      + f"-steps{recipe['steps']}-lr{recipe['lr']:g}-bs{recipe['batch_size']}-seed{recipe['seed']}")
    if folder.exists() and not rebuild:
        return folder
    loaded = load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32")
    texts = training_texts(data_dir)
    model = copy.deepcopy(loaded.model)
    started = time.perf_counter()
    losses = fine_tune(model, loaded.tokenizer, texts, recipe)
    seconds = time.perf_counter() - started
    for stale in (folder, folder.with_name(folder.name + ".partial")):
        shutil.rmtree(stale, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, loaded.tokenizer, folder, {"categories": BIASED_CATEGORIES, "recipe": recipe,
                                                      "texts": len(texts), "fine_tune_s": round(seconds, 1),
                                                      "first_loss": losses[0], "last_loss": losses[-1]})
    print(f"biased: {len(losses)} steps over {len(texts)} texts in {seconds:.0f} s, loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}; saved {folder}", flush=True)
    return folder


def gate(model: str, extra: list[str], data_dir: Path, name: str) -> tuple[dict, float]:
    results_json = CACHE / f"{name}.results.json"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--model={model}", "--dtype=float32",
               "--allow-task-code", "--baseline-name=default", f"--data-dir={data_dir}", *extra,
               "suites/bbq/bbq_sample.yaml", f"--results-json={results_json}"]
    cache = CACHE / f"score-cache-{name}"
    shutil.rmtree(cache, ignore_errors=True)  # from empty: the run scores every document itself
    started = time.perf_counter()
    run = subprocess.run(command, cwd=ROOT, env={**os.environ, "MODELBENCH_CACHE_DIR": str(cache)},
                         capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if run.returncode not in (0, 1):  # 1: the gate blocked, an answer like any other
        raise SystemExit(f"pytest exited {run.returncode} for {model}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return json.loads(results_json.read_text())["gate"][TASK_KEY], seconds


def report(name: str, result: dict, seconds: float, expected: set[str]) -> None:
    entries = result["entries"]
    flagged = {e["category"] or "overall" for e in entries if e["verdict"] == "regressed"}
    print(f"\n{name}: gate {result['status']} ({len(entries)} entries, pytest {seconds:.0f} s)")
    for e in entries:
        if e["verdict"] in ("regressed", "improved"):
            print(f"  {e['verdict'].upper():<9} {e['metric']:<18} {e['category'] or 'overall':<20} "
                  f"{e['baseline']:+.4f} -> {e['candidate']:+.4f}  delta {e['delta']:+.4f}  margin {e['margin']:.3f}  "
                  f"p {e['p_value']:.3g}")
    categories = flagged - {"overall"}
    print(f"  categories with a regressed entry: {sorted(categories) or 'none'}; expected {sorted(expected) or 'none'}"
          f" -> {'exactly those' if categories == expected else 'NOT exactly those'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".modelbench-data")
    parser.add_argument("--runs", nargs="+", choices=("biased", "batch1"), default=["biased", "batch1"])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)
    if not (args.data_dir / BBQ_FILE).exists():
        subprocess.run([sys.executable, str(ROOT / "scripts/shared_data_mirror.py"), str(args.data_dir)], check=True,
                       stdout=subprocess.DEVNULL)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    recipe = {"steps": args.steps, "lr": args.lr, "batch_size": args.batch_size, "seed": args.seed}
    if "biased" in args.runs:
        folder = build_biased(recipe, args.data_dir, args.rebuild)
        report(f"fine-tuned towards stereotyped answers in {', '.join(BIASED_CATEGORIES)}",
               *gate(str(folder), [], args.data_dir, "bbq-biased"), set(BIASED_CATEGORIES))
    if "batch1" in args.runs:
        report("default model at --batch-size 1", *gate("smollm2-135m", ["--batch-size=1"], args.data_dir, "batch1"),
               set())
    return 0


if __name__ == "__main__":
    sys.exit(main())
