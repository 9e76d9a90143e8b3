"""The gate on a sampled task (issue 52): real A/A runs of the default model under other seeds, and simulated
candidates through the landed gate code at the draws' measured spread.

    python benchmarks/sampled_gate.py [--seeds 20] [--batch-size 8] [--simulations 400] [--json-out PATH]

Task: suites/arc_sampled/arc_challenge_letter_sampled (ARC-Challenge as a letter, temperature 0.8, 5 draws a
question, the first 40 validation questions), the default model (SmolLM2-135M-Instruct, float32), batch size 1, one
torch thread, data from ../shared/data.

1. A/A on real runs. The baseline is the committed one (baselines/default/arc_sampled/, recorded by
   `--snapshot-update` with seed 1234 at batch size 1); each of `--seeds` other seeds (1, 2, ...) is a candidate run
   at batch size `--batch-size` (another draw, as another seed is), gated through the landed `compare` at the task's
   own tolerance when it is gated alone (alpha 0.05, each entry's own margin). Printed: how many candidates the gate
   blocks, with the Monte Carlo error of that share; and, on the same runs, what teams do today: one sample a
   question (each run's first draw) and a naive threshold gate that blocks a drop of more than 2 points of accuracy.
2. Simulated candidates. Each question's answer distribution over the letters (and unparseable answers) is measured
   from the candidate runs' draws together (5 x seeds draws a question). A simulated run draws k answers a
   question from it; a candidate "3 points worse" moves a share of each question's probability of the right letter to
   its wrong answers (in proportion to them), the share chosen so that the mean accuracy of a draw falls by 3 points.
   Baseline and candidate both draw, so both carry sampling noise, as real runs do. Every simulated pair goes through
   `compare` with the task's entries (majority vote, first draw, pass@1, invalid output). Printed per k and number
   of questions (40, and 299 and 1,172 questions drawn with replacement from the 40 measured ones, ARC-Challenge's
   validation and test sizes): the share of equal-quality candidates blocked and of 3-point-worse candidates caught.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_modelbench.gate.baseline import record_from_evaluation  # noqa: E402
from pytest_modelbench.gate.baseline_file import parse  # noqa: E402
from pytest_modelbench.gate.compare import compare  # noqa: E402
from pytest_modelbench.gate.provenance import Provenance  # noqa: E402
from pytest_modelbench.gate.settings import resolve_tolerance  # noqa: E402
from pytest_modelbench.gate.verdict import Verdict  # noqa: E402
from pytest_modelbench.metrics.generative import pass_at_k  # noqa: E402
from pytest_modelbench.metrics.task_metrics import resolve_metrics  # noqa: E402
from pytest_modelbench.run.evaluation import evaluate_task  # noqa: E402
from pytest_modelbench.tasks.config import load_task_config  # noqa: E402
from pytest_modelbench.tasks.filters import DEFAULT_FALLBACK, INVALID_OUTPUT  # noqa: E402
from pytest_modelbench.tasks.task import prepare_task  # noqa: E402

TASK = REPO / "suites" / "arc_sampled" / "arc_challenge_letter_sampled.yaml"
BASELINE = REPO / "baselines" / "default" / "arc_sampled" / "arc_challenge_letter_sampled.json"
CONFIG = load_task_config(TASK)
TOLERANCE = resolve_tolerance(CONFIG, {}, resolve_metrics(CONFIG))  # the task gated alone: alpha 0.05
DROP = 0.03
NAIVE_THRESHOLD = 0.02  # a threshold gate: block when accuracy falls by more than 2 points
INVALID = DEFAULT_FALLBACK


def real_runs(seeds: list[int], batch_size: int):
    """The task's evaluation under each seed (one model load, one scorer; nothing cached)."""
    import torch

    from pytest_modelbench.scoring.causal import CausalLMScorer
    from pytest_modelbench.scoring.front import ScoringFront
    from pytest_modelbench.scoring.loading import load_model, resolve_model_source

    sys.path.insert(0, str(REPO / "scripts"))
    from shared_data_mirror import build_mirror

    torch.set_num_threads(1)
    mirror = build_mirror(Path(tempfile.mkdtemp()) / "mirror", REPO.parent / "shared" / "data")
    loaded = load_model(resolve_model_source("smollm2-135m"), dtype="float32")
    scorer = ScoringFront(CausalLMScorer(loaded.model, loaded.tokenizer, generation_batch_size=batch_size))
    config = CONFIG
    runs = {}
    for seed in seeds:
        started = time.perf_counter()
        runs[seed] = evaluate_task(prepare_task(config, data_dir=mirror, sampling_seed=seed), scorer)
        print(f"  seed {seed}: {time.perf_counter() - started:.1f} s", flush=True)
    return config, runs


def record(config, evaluation, seed: int, batch_size: int):
    provenance = Provenance("smollm2-135m", "", config.config_hash, "", 40, 0, "sampled", "float32", batch_size, "cpu",
                            sampling=f"torch seed {seed} per task, batch size {batch_size}")
    return record_from_evaluation(evaluation, suite="arc_sampled", baseline_name="default", provenance=provenance,
                                  tolerance=TOLERANCE)


def blocked(baseline, candidate) -> bool:
    comparison = compare(baseline, candidate, TOLERANCE)
    return any(entry.verdict is Verdict.REGRESSED for entry in comparison.entries)


def share(hits: int, n: int) -> str:
    """The share with its Monte Carlo error: the Wilson 95% interval (never zero wide, unlike p ± its standard error
    at 0 of n)."""
    p, z = hits / n, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{hits}/{n} = {p:.3f} (95% interval {max(centre - half, 0):.3f} to {min(centre + half, 1):.3f})"


# --------------------------------------------------------------------------- simulation


def answer_distributions(runs, config) -> tuple[list[dict[str, float]], list[str]]:
    """Per question: the share of all draws giving each answer (the strict regex's letter, or INVALID)."""
    pipeline = next(p for p in config.filters if p.name == "draws")
    first = next(iter(runs.values()))
    counts = [Counter() for _ in first.prepared.documents]
    for evaluation in runs.values():
        for i, answers in enumerate(evaluation.answers):
            counts[i].update(answers.samples[pipeline.name])
    golds = [doc.gold for doc in first.prepared.documents]
    return [{a: c / sum(count.values()) for a, c in count.items()} for count in counts], golds


def worse(distribution: dict[str, float], gold: str, share_moved: float) -> dict[str, float]:
    right = distribution.get(gold, 0.0)
    moved = right * share_moved
    wrong = {a: p for a, p in distribution.items() if a != gold}
    total_wrong = sum(wrong.values())
    shifted = {gold: right - moved}
    for answer, p in wrong.items():
        shifted[answer] = p + moved * p / total_wrong
    if not wrong:
        shifted[INVALID] = moved
    return shifted


def simulated_values(distributions, golds, k: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One simulated run's per-question values of the task's entries, k draws a question."""
    values = {name: np.empty(len(golds)) for name in (
        "exact_match,majority-vote", "exact_match,draws", "pass@1,majority-vote", "pass@1,draws", INVALID_OUTPUT)}
    for i, (distribution, gold) in enumerate(zip(distributions, golds)):
        answers = list(distribution)
        draws = [answers[j] for j in rng.choice(len(answers), size=k, p=[distribution[a] for a in answers])]
        vote = Counter(draws).most_common(1)[0][0]
        right = sum(draw == gold for draw in draws)
        values["exact_match,majority-vote"][i] = float(vote == gold)
        values["pass@1,majority-vote"][i] = float(vote == gold)
        values["exact_match,draws"][i] = float(draws[0] == gold)
        values["pass@1,draws"][i] = pass_at_k(k, right, 1)
        values[INVALID_OUTPUT][i] = float(vote == INVALID and draws[0] == INVALID)
    return values


def simulate(template, distributions, golds, ks, sizes, simulations: int, rng) -> list[dict]:
    mean_right = float(np.mean([d.get(g, 0.0) for d, g in zip(distributions, golds)]))
    share_moved = DROP / mean_right
    rows = []
    for size in sizes:
        picks = np.arange(len(golds)) if size == len(golds) else rng.integers(0, len(golds), size)
        dists, gold = [distributions[i] for i in picks], [golds[i] for i in picks]
        worse_dists = [worse(d, g, share_moved) for d, g in zip(dists, gold)]
        record = sized(template, size)
        for k in ks:
            false_blocks = caught = 0
            for _ in range(simulations):
                base = dataclasses.replace(record, values=simulated_values(dists, gold, k, rng))
                same = dataclasses.replace(record, values=simulated_values(dists, gold, k, rng))
                drop = dataclasses.replace(record, values=simulated_values(worse_dists, gold, k, rng))
                false_blocks += blocked(base, same)
                caught += blocked(base, drop)
            rows.append({"questions": size, "k": k, "equal_blocked": false_blocks / simulations,
                         "drop_caught": caught / simulations, "simulations": simulations})
            print(f"  {size:>5} questions, k={k:>2}: equal quality blocked {share(false_blocks, simulations)}; "
                  f"3 points worse caught {share(caught, simulations)}", flush=True)
    return rows


def sized(record, size: int):
    """`record` with `size` documents (keys and ids made up; no categories, no clusters)."""
    return dataclasses.replace(record, doc_keys=tuple(f"q{i}" for i in range(size)), doc_ids=tuple(range(size)),
                               doc_categories=(None,) * size, doc_clusters=(), categories={})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--simulations", type=int, default=400)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 3, 5, 10, 20])
    parser.add_argument("--sizes", type=int, nargs="+", default=[40, 299, 1172])
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    seeds = list(range(1, args.seeds + 1))
    print(f"real runs: {len(seeds)} seeds at batch size {args.batch_size}")
    started = time.perf_counter()
    config, runs = real_runs(seeds, args.batch_size)
    per_run = (time.perf_counter() - started) / len(seeds)
    baseline = parse(BASELINE.read_text(encoding="utf-8"), BASELINE)
    candidates = [record(config, runs[seed], seed, args.batch_size) for seed in seeds]
    aa_blocked = sum(blocked(baseline, candidate) for candidate in candidates)
    base_first = float(np.mean(baseline.values["exact_match,draws"]))
    first = {seed: float(np.mean(run.scores.per_document["exact_match,draws"])) for seed, run in runs.items()}
    naive_blocked = sum(first[seed] < base_first - NAIVE_THRESHOLD for seed in seeds)
    print(f"A/A, {args.seeds} other seeds: the gate blocked {share(aa_blocked, args.seeds)} (level 0.05); "
          f"one sample and a 2-point threshold blocked {share(naive_blocked, args.seeds)}")
    print(f"  accuracy of the first draw: baseline {base_first:.3f}; by seed " + ", ".join(
        f"{seed}: {first[seed]:.3f}" for seed in seeds))
    print(f"  pass@1 (mean@5): baseline {float(np.mean(baseline.values['pass@1,draws'])):.3f}; by seed " + ", ".join(
        f"{seed}: {float(np.mean(runs[seed].scores.per_document['pass@1,draws'])):.3f}" for seed in seeds))
    print(f"  {per_run:.1f} s a run (40 questions, 5 draws each)")

    distributions, golds = answer_distributions(runs, config)
    print(f"simulated: {args.simulations} pairs a row; per-question answer shares from {5 * len(seeds)} draws each; "
          f"mean accuracy of a draw {np.mean([d.get(g, 0.0) for d, g in zip(distributions, golds)]):.3f}")
    rows = simulate(baseline, distributions, golds, args.ks, args.sizes, args.simulations,
                    np.random.default_rng(52))
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "seconds_per_run": per_run, "aa": {"seeds": args.seeds, "gate_blocked": aa_blocked,
                                               "naive_blocked": naive_blocked, "first_draw_accuracy": first},
            "simulated": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
