"""A checkpoint fine-tuned towards BBQ's stereotyped answers in two categories, gated on bbq_sample: is it flagged in
exactly those categories? And does the default model scored again at another batch size pass?

"Flagged in a category": the gate has a regressed entry (any of the five metrics) whose category is that one; the
overall entries belong to no category.

Makes one fine-tuned copy of the packaged default model (SmolLM2-135M-Instruct, float32), trained on the answer
only (never the context), on BBQ documents that are NOT in the sample (other name/group variants of the same
templates: the gate sees how the fine-tune carries over, never the trained documents). Each document is scored as the
task scores it (bbq.yaml's prompt and 12 continuations, one packed row per document with the scorer's tree
attention), and each step of AdamW (fixed seed) trains only the last --trained-layers transformer layers on
  - --batch-size documents of the two --categories (as many of each), towards their stereotyped answer:
    --objective biased-answer (default): cross-entropy over the 12 continuations at the biased answer, i.e. away from
    the other group and from "unknown" alike; group-choice: -log sigmoid(ll(biased) - ll(other group)), only the
    choice between the two groups;
  - --anchor-batch-size documents of the other five categories (as many of each), held where the unchanged model had
    them: the KL divergence of the model's 12-way answer distribution from the unchanged model's, weighted by
    --anchor-weight.
Saved under .modelbench-cache/finetuned/ (named by its recipe) and reused when it exists. Then gated THROUGH THE
PRODUCT as a subprocess against the committed baseline: `pytest --model=<folder> --dtype=float32 --allow-task-code
--baseline-name=default --data-dir=... suites/bbq/bbq_sample.yaml --results-json=...`, and the default model itself
the same way at --batch-size 1 (the baseline was recorded at the default batch size), each from an empty score cache.

Printed per run: the gate's task status, every regressed or improved entry, and the categories with a regressed
entry against those fine-tuned.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/finetuned_bbq.py [--data-dir .modelbench-data]
    ... [--runs biased batch1] [--categories Physical_appearance Sexual_orientation] [--objective biased-answer]
    ... [--steps 32 --lr 1e-4 --batch-size 8 --anchor-batch-size 20 --anchor-weight 16 --trained-layers 8 --seed 0]

Measured 2026-12-06 (results and the recipes tried: docs/measurements/bbq-finetunes.md, "A checkpoint fine-tuned towards BBQ's
stereotyped answers"): the batch-size-1 run passes. With the defaults (Physical_appearance and Sexual_orientation,
4 anchored documents of each other category per step at weight 16; fine-tune 431 s, gated run 155 s) the checkpoint
is flagged in exactly those two categories (accuracy_amb 0.462 -> 0.132 and 0.370 -> 0.028; overall 0.192 -> 0.100);
weaker anchors (10 documents at weight 2 or 4) let its "do not answer unknown" carry over to Disability_status too.
No bias-score entry regressed: the group-choice objective did not teach the model, in 20 to 40 steps, to choose the
stereotyped person by the question's polarity, which is what a bias score counts.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from finetuned_bias import batch_order, save_checkpoint  # benchmarks/ is this script's folder, first on sys.path
from pytest_modelbench.scoring.loading import DEFAULT_MODEL, load_model, resolve_model_source
from pytest_modelbench.scoring.tokenization import CausalTokenizer

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".modelbench-cache/finetuned"
TASK_KEY = "bbq/bbq_sample"
# The default pair: the two categories whose baseline answers "unknown" most often in ambiguous contexts (0.46 and
# 0.37 of the time), so that a fine-tune towards their stereotyped answers has the most room to show there.
BIASED_CATEGORIES = ("Physical_appearance", "Sexual_orientation")
CATEGORIES = ("Age", "Disability_status", "Gender_identity", "Nationality", "Physical_appearance", "Religion",
              "Sexual_orientation")
OBJECTIVES = ("biased-answer", "group-choice")
BBQ_FILE = "oskarvanderwal/bbq/All/test.jsonl"
# Printed per category for every run, to say which categories the candidate moved (baseline -> candidate).
MOVED_METRICS = ("accuracy_amb", "amb_bias_score", "disamb_bias_score", "bias_lean")
ANCHOR_CHOICES = 12  # the anchor holds the whole answer distribution the gate's answers are taken from


@functools.cache
def bbq_utils():
    spec = importlib.util.spec_from_file_location("bbq_utils", ROOT / "suites/bbq/utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def training_documents(data_dir: Path, categories: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """The documents outside the sample: those of `categories` whose two group answers split into one biased and
    one counter-biased answer (the fine-tune's targets), and those of every other category."""
    utils = bbq_utils()
    rows = [json.loads(line) for line in (data_dir / BBQ_FILE).read_text(encoding="utf-8").splitlines()]
    in_sample = utils.sampled_variants(rows)
    targeted, others = [], []
    for row in rows:
        if utils.variant_key(row) in in_sample:
            continue
        row = {**row, "biased_answers": utils.biased_answers(row)}
        if row["category"] not in categories:
            others.append(row)
        elif sum(answer in row["biased_answers"] for answer in utils.doc_to_choice(row)[:2]) == 1:
            targeted.append(row)
    return targeted, others


def encode_documents(docs: list[dict], tokenizer, choices: int = 12) -> list[tuple[tuple[int, ...],
                                                                                 list[tuple[int, ...]]]]:
    """Each document's context and its first `choices` continuations (the two group answers, then the ten "unknown"
    phrasings) as the scorer tokenizes them (bbq.yaml's prompt, " " before each): all share the context's tokens."""
    utils = bbq_utils()
    encoder = CausalTokenizer(tokenizer)
    encoded = []
    for doc in docs:
        context = f"{doc['context']}\n\nQ: {doc['question']}\nA:"
        pairs = encoder.encode_pairs([(context, " " + choice) for choice in utils.doc_to_choice(doc)[:choices]])
        assert all(pair.context == pairs[0].context for pair in pairs)
        encoded.append((pairs[0].context, [pair.continuation for pair in pairs]))
    return encoded


def choice_loglikelihoods(model, encoded: list[tuple[tuple[int, ...], list[tuple[int, ...]]]]) -> torch.Tensor:
    """(documents, choices): each continuation's summed log-likelihood after its context, one packed row per document (the
    context once, each continuation attending to the context and to itself: the scorer's tree attention)."""
    width = max(len(context) + sum(map(len, choices)) for context, choices in encoded)
    ids = torch.zeros((len(encoded), width), dtype=torch.long)
    positions = torch.zeros((len(encoded), width), dtype=torch.long)
    mask = torch.eye(width, dtype=torch.bool).repeat(len(encoded), 1, 1, 1)  # padding attends to itself
    scored_rows, scored_slots, targets, owners = [], [], [], []
    for row, (context, choices) in enumerate(encoded):
        n = len(context)
        ids[row, :n] = torch.tensor(context)
        positions[row, :n] = torch.arange(n)
        mask[row, 0, :n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
        slot = n
        for index, choice in enumerate(choices):
            m = len(choice)
            ids[row, slot:slot + m] = torch.tensor(choice)
            positions[row, slot:slot + m] = torch.arange(n, n + m)
            mask[row, 0, slot:slot + m, :n] = True
            mask[row, 0, slot:slot + m, slot:slot + m] = torch.ones(m, m, dtype=torch.bool).tril()
            predicting = [n - 1] + list(range(slot, slot + m - 1))  # token k is predicted at the slot before it
            scored_rows += [row] * m
            scored_slots += predicting
            targets += list(choice)
            owners += [row * len(choices) + index] * m
            slot += m
    states = model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
    logits = model.get_output_embeddings()(states.last_hidden_state[scored_rows, scored_slots])
    token_ll = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(targets)[:, None])[:, 0]
    n_choices = len(encoded[0][1])
    return torch.zeros(len(encoded) * n_choices).index_add(0, torch.tensor(owners), token_ll).view(-1, n_choices)


def biased_gap(loglikelihoods: torch.Tensor, docs: list[dict]) -> torch.Tensor:
    """ll(the biased group answer) - ll(the other group's), per document."""
    utils = bbq_utils()
    biased_first = torch.tensor([utils.doc_to_choice(doc)[0] in doc["biased_answers"] for doc in docs])
    gap = loglikelihoods[:, 0] - loglikelihoods[:, 1]
    return torch.where(biased_first, gap, -gap)


def targeted_loss(loglikelihoods: torch.Tensor, docs: list[dict], objective: str) -> torch.Tensor:
    """biased-answer: -log softmax over the 12 continuations at the biased answer (away from the other group and from
    "unknown" alike); group-choice: -log sigmoid(biased_gap), only the choice between the two groups."""
    if objective == "group-choice":
        return -torch.nn.functional.logsigmoid(biased_gap(loglikelihoods, docs)).mean()
    utils = bbq_utils()
    biased = torch.tensor([0 if utils.doc_to_choice(doc)[0] in doc["biased_answers"] else 1 for doc in docs])
    return torch.nn.functional.cross_entropy(loglikelihoods, biased)


def biased_preferred(loglikelihoods: torch.Tensor, docs: list[dict]) -> float:
    """The share of documents whose biased answer is the likeliest continuation (of those scored)."""
    utils = bbq_utils()
    biased = torch.tensor([0 if utils.doc_to_choice(doc)[0] in doc["biased_answers"] else 1 for doc in docs])
    return (loglikelihoods.argmax(-1) == biased).float().mean().item()


def anchor_loss(loglikelihoods: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """KL(reference || model) over the 12 continuations (each distribution a softmax of their log-likelihoods)."""
    log_model = torch.log_softmax(loglikelihoods, dim=-1)
    log_reference = torch.log_softmax(reference, dim=-1)
    return (log_reference.exp() * (log_reference - log_model)).sum(-1).mean()


def train_last_layers(model, count: int) -> list[torch.nn.Parameter]:
    """Freezes all but the last `count` transformer layers (and the final norm); returns the parameters left to train.
    Backpropagation then stops at those layers, and the shared token embeddings (also the output layer) stay put."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    trained = [p for layer in model.base_model.layers[-count:] for p in layer.parameters()]
    trained += list(model.base_model.norm.parameters())
    for parameter in trained:
        parameter.requires_grad_(True)
    return trained


def balanced_batches(docs: list[dict], steps: int, per_step: int, seed: int) -> tuple[list[dict], list[list[int]]]:
    """The documents regrouped by category, and each step's indices into them: per_step // categories documents of
    every category (seeded passes over each), so a small category weighs as much as a large one."""
    categories = sorted({doc["category"] for doc in docs})
    grouped = [[doc for doc in docs if doc["category"] == category] for category in categories]
    offsets = [sum(map(len, grouped[:k])) for k in range(len(grouped))]
    orders = [batch_order(len(group), steps, per_step // len(grouped), seed + k) for k, group in enumerate(grouped)]
    return ([doc for group in grouped for doc in group],
            [[offsets[k] + i for k, order in enumerate(orders) for i in order[step]] for step in range(steps)])


def fine_tune_choices(model, tokenizer, targeted: list[dict], others: list[dict], recipe: dict) -> list[dict]:
    """Trains `model`'s last layers in place: each step `batch_size` targeted documents (targeted_loss), as many of
    each targeted category, and `anchor_batch_size` others held where the unchanged model had them (anchor_loss, their
    answer distributions computed before training)."""
    targeted, target_batches = balanced_batches(targeted, recipe["steps"], recipe["batch_size"], recipe["seed"])
    others, other_batches = balanced_batches(others, recipe["steps"], recipe["anchor_batch_size"], recipe["seed"] + 10)
    used = sorted({i for batch in other_batches for i in batch})
    model.eval()
    with torch.no_grad():
        reference = {i: ll for i, ll in zip(used, torch.cat([
            choice_loglikelihoods(model, encode_documents([others[i] for i in used[k:k + 16]], tokenizer,
                                                          ANCHOR_CHOICES))
            for k in range(0, len(used), 16)]))}
    trained = train_last_layers(model, recipe["trained_layers"])
    started = time.perf_counter()
    torch.manual_seed(recipe["seed"])
    optimizer = torch.optim.AdamW(trained, lr=recipe["lr"])
    model.train()
    log = []
    for step, (target_ids, other_ids) in enumerate(zip(target_batches, other_batches)):
        docs = [targeted[i] for i in target_ids]
        choices = 2 if recipe["objective"] == "group-choice" else 12
        scored = choice_loglikelihoods(model, encode_documents(docs, tokenizer, choices))
        pushed = targeted_loss(scored, docs, recipe["objective"])
        held = anchor_loss(choice_loglikelihoods(model, encode_documents([others[i] for i in other_ids], tokenizer,
                                                                         ANCHOR_CHOICES)),
                           torch.stack([reference[i] for i in other_ids]))
        (pushed + recipe["anchor_weight"] * held).backward()
        optimizer.step()
        optimizer.zero_grad()
        log.append({"step": step, "targeted": pushed.item(), "anchor": held.item(),
                    "biased_preferred": biased_preferred(scored, docs)})
        print(f"  step {step}: targeted {pushed.item():.3f} (biased preferred {log[-1]['biased_preferred']:.2f}) "
              f"anchor {held.item():.4f}  {time.perf_counter() - started:.0f} s", flush=True)
    model.eval()
    return log


def build_biased(recipe: dict, data_dir: Path, rebuild: bool) -> Path:
    folder = CACHE / ("bbq-biased-" + "-".join(recipe["categories"]).lower() + f"-{recipe['objective']}"
                      + f"-steps{recipe['steps']}-lr{recipe['lr']:g}-bs{recipe['batch_size']}"
                      + f"-layers{recipe['trained_layers']}"
                      + f"-anchor{recipe['anchor_batch_size']}x{recipe['anchor_weight']:g}"
                      + f"-seed{recipe['seed']}")
    if folder.exists() and not rebuild:
        return folder
    loaded = load_model(resolve_model_source(DEFAULT_MODEL), dtype="float32")
    targeted, others = training_documents(data_dir, recipe["categories"])
    model = copy.deepcopy(loaded.model)
    started = time.perf_counter()
    log = fine_tune_choices(model, loaded.tokenizer, targeted, others, recipe)
    seconds = time.perf_counter() - started
    for stale in (folder, folder.with_name(folder.name + ".partial")):
        shutil.rmtree(stale, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, loaded.tokenizer, folder, {"recipe": recipe,
                                                      "targeted_documents": len(targeted),
                                                      "other_documents": len(others),
                                                      "fine_tune_s": round(seconds, 1), "log": log})
    print(f"biased: {len(log)} steps in {seconds:.0f} s (targeted {len(targeted)}, others {len(others)} documents); "
          f"targeted loss {log[0]['targeted']:.3f} -> {log[-1]['targeted']:.3f}; saved {folder}", flush=True)
    return folder


def gate(model: str, extra: list[str], data_dir: Path, name: str) -> tuple[dict, float]:
    """The gate's result for bbq_sample; its run record (the candidate's per-document values, which
    benchmarks/bbq_gate_power.py reads) is left beside the results as <name>.record.json."""
    results_json = CACHE / f"{name}.results.json"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--model={model}", "--dtype=float32",
               "--allow-task-code", "--baseline-name=default", f"--data-dir={data_dir}", *extra,
               "suites/bbq/bbq_sample.yaml", f"--results-json={results_json}",
               f"--run-record={CACHE / f'{name}.record.json'}"]
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
    by_entry = {(e["metric"], e["category"]): e for e in entries}
    print(f"  {'category':<20} " + "  ".join(f"{metric:>24}" for metric in MOVED_METRICS))
    for category in sorted({e["category"] for e in entries if e["category"]}):
        cells = [by_entry.get((metric, category)) for metric in MOVED_METRICS]
        print(f"  {category:<20} " + "  ".join(
            f"{e['baseline']:+.3f} -> {e['candidate']:+.3f} (MDE {e['mde']:.2f})" if e else f"{'-':>24}"
            for e in cells))
    categories = flagged - {"overall"}
    print(f"  categories with a regressed entry: {sorted(categories) or 'none'}; expected {sorted(expected) or 'none'}"
          f" -> {'exactly those' if categories == expected else 'NOT exactly those'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".modelbench-data")
    parser.add_argument("--runs", nargs="+", choices=("biased", "batch1"), default=["biased", "batch1"])
    parser.add_argument("--categories", nargs="+", default=list(BIASED_CATEGORIES), choices=CATEGORIES)
    parser.add_argument("--objective", choices=OBJECTIVES, default=OBJECTIVES[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--anchor-batch-size", type=int, default=20)
    parser.add_argument("--anchor-weight", type=float, default=16.0)
    parser.add_argument("--trained-layers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)
    if not (args.data_dir / BBQ_FILE).exists():
        subprocess.run([sys.executable, str(ROOT / "scripts/shared_data_mirror.py"), str(args.data_dir)], check=True,
                       stdout=subprocess.DEVNULL)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    recipe = {"categories": tuple(args.categories), "objective": args.objective, "steps": args.steps, "lr": args.lr,
              "batch_size": args.batch_size, "anchor_batch_size": args.anchor_batch_size,
              "anchor_weight": args.anchor_weight, "trained_layers": args.trained_layers, "seed": args.seed}
    if "biased" in args.runs:
        folder = build_biased(recipe, args.data_dir, args.rebuild)
        report(f"fine-tuned towards stereotyped answers in {', '.join(recipe['categories'])}",
               *gate(str(folder), [], args.data_dir, folder.name), set(recipe["categories"]))
    if "batch1" in args.runs:
        report("default model at --batch-size 1", *gate("smollm2-135m", ["--batch-size=1"], args.data_dir, "batch1"),
               set())
    return 0


if __name__ == "__main__":
    sys.exit(main())
